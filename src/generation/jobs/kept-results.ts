/**
 * The results of lately ended jobs, kept by the job book (job-book.ts) for awaits that come later: a second await
 * of a job that ended a moment ago gets its result at once, without asking the server. Apart from the book because
 * what is kept, and in what form, is its own question: the book only keeps and asks. No Node-RED inside.
 */
import type { JobResult } from './job-life';
import { RecentMap } from './recent-map';

/**
 * Results of ended jobs kept for awaits that come later: at least this many of the latest (at most twice). A
 * later await of an older one asks the server, as a resumed await does. Not more: while thousands of jobs end
 * at once, each kept result is copied by the young collections until old, and 1,024 kept made them copy 2-3 MB
 * in a burst of 10,000 ends, against 0.2-0.3 MB with none kept. Each is kept as its JSON text (`keptText`).
 */
const RESULTS_KEPT = 256;
/**
 * A result kept is at most this long as text, so the kept ones hold at most 512 of that however large a job's
 * outputs (up to MAX_OUTPUT_BYTES each, job-life.ts); a later await of a larger one asks the server. Most results
 * are under 2 KB.
 */
const KEPT_RESULT_CHARS = 256 * 1024;

export class KeptResults {
  /** By prompt_id, as JSON text (`keptText`). */
  private readonly texts = new RecentMap<string, string>(RESULTS_KEPT);

  /** Keeps the result of a job that ended, unless it is too long to keep. */
  keep(promptId: string, result: JobResult): void {
    const kept = keptText(result);
    if (kept !== undefined) this.texts.set(promptId, kept);
  }

  /** The kept result of this job, a new object for each call (each await's flow may change its own); or none. */
  get(promptId: string): JobResult | undefined {
    const text = this.texts.get(promptId);
    // Text this module wrote from a result: read as it was written.
    return text === undefined ? undefined : (JSON.parse(text) as JobResult);
  }
}

/**
 * A result as it is kept for later awaits: its JSON text, which shares nothing with the result the first await's
 * flow may change, and is one flat string where a copy was a graph of a dozen objects. In a burst of 10,000 ends
 * the kept results are what the young collections copy most (a sampling heap profile of bench/many-jobs.js: a
 * sixth of the bytes that outlived a young collection); a string is copied as one block. Costs what the copy
 * did (about 1 µs a result). A result longer than KEPT_RESULT_CHARS, or one that cannot be written (none should:
 * every part came from JSON, nested within MAX_JSON_DEPTH), is not kept, and a later await asks the server.
 */
function keptText(result: JobResult): string | undefined {
  try {
    const text = JSON.stringify(result);
    return text.length <= KEPT_RESULT_CHARS ? text : undefined;
  } catch {
    return undefined;
  }
}
