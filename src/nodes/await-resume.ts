/**
 * Where an await-job node keeps the jobs it awaits so they are awaited again after Node-RED restarts (setting
 * "resume after a restart"): one journal per node under `<userDir>/graph-gen/` (node-state.ts names it), the msg
 * of each await as kept-awaits.ts keeps it. A node removed from the flows (deleted or disabled, or gone from the
 * flows file while Node-RED was down) has its journal removed. Writes are batched (persist/journal.ts): one per
 * await and end at most, fewer in a burst, never one per event. An await whose msg is too large to keep is
 * awaited now and not kept, and the node warns at once: the journal's one size rule decides.
 */
import type { NodeAPI } from 'node-red';
import { Journal, MAX_LINE_BYTES } from '../persist/journal';
import { keptMessage, readKeptAwait, restoredMessage, type KeptAwait } from '../generation/jobs/kept-awaits';
import { textOf } from '../boundary/outside';
import { nodeFile, sweepNodeFiles } from './node-state';

const PREFIX = 'await-job-';
const SUFFIX = '.jsonl';

/** One node's kept awaits, keyed per msg (one job may be awaited by several msgs). */
export class KeptAwaits {
  private constructor(
    private readonly journal: Journal<KeptAwait>,
    private readonly log: (message: string) => void,
  ) {}

  static async open(RED: NodeAPI, nodeId: string, log: (message: string) => void): Promise<KeptAwaits> {
    sweepNodeFiles(RED, 'graph-gen-await-job', PREFIX, SUFFIX);
    const journal = await Journal.open<KeptAwait>(nodeFile(RED, PREFIX, nodeId, SUFFIX), {
      log,
      readValue: readKeptAwait,
    });
    return new KeptAwaits(journal, log);
  }

  /** The awaits kept when the node last stopped: key, job, config node, msg, deadline. */
  kept(): Array<{
    key: string;
    promptId: string;
    config: string;
    msg: Record<string, unknown>;
    deadline?: number;
  }> {
    const kept = [];
    for (const [key, entry] of this.journal.entries()) {
      const cut = key.lastIndexOf('#');
      // Not a key this node made: nothing to await.
      if (cut <= 0) {
        this.journal.delete(key);
        continue;
      }
      const msg = restoredMessage(entry.msg);
      if (Object.hasOwn(msg, '_msgid') && typeof msg._msgid !== 'string') delete msg._msgid;
      kept.push({ key, promptId: key.slice(0, cut), config: entry.config, msg, deadline: entry.deadline });
    }
    return kept;
  }

  /**
   * Keeps an await; the returned key forgets it. `omitted` names the msg's parts not kept. A msg that cannot be
   * kept (too large) gives no key, and the node warns now, not after a restart when the result fails to come.
   */
  add(
    promptId: string,
    config: string,
    msg: Record<string, unknown>,
    deadline: number | undefined,
  ): { key?: string; omitted: string[] } {
    // `#` parts the job from the rest: a msg id holding one must not move that line.
    const msgId = (textOf(msg._msgid, 100) ?? '').replace(/#/g, '');
    const key = `${promptId}#${msgId}${Math.random().toString(36).slice(2, 8)}`;
    const kept = keptMessage(msg, MAX_LINE_BYTES);
    const entry = kept.ok
      ? this.journal.set(key, { config, msg: kept.msg, ...(deadline !== undefined ? { deadline } : {}) })
      : kept;
    if (!entry.ok) {
      this.log(
        `graph-gen: the await of job ${promptId.slice(0, 100)} is not kept for a restart, as its msg cannot be kept: ${entry.reason}. It is awaited now, but if Node-RED restarts before the job ends, its result will not come. Keep large data out of the msg (in a file, or flow context) to have it resumed.`,
      );
      return { omitted: [] };
    }
    return { key, omitted: kept.ok ? kept.omitted : [] };
  }

  forget(key: string): void {
    this.journal.delete(key);
  }

  /** The node stops but stays in the flows: what is kept is written, for the next start. */
  close(): Promise<void> {
    return this.journal.close();
  }

  /** The node was removed from the flows: its kept awaits go. */
  destroy(): Promise<void> {
    return this.journal.destroy();
  }
}
