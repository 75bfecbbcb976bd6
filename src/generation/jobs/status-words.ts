/**
 * Job status words onto the few states the package acts on. The spec names five; real deployments also
 * answer with their own words (FACTS.md), and an unknown word must never end a job, so it counts as running.
 * A word comes from outside: it is looked up in a Map, so `constructor` or `__proto__` is an unknown word, not
 * a member of an object's prototype.
 */

export type JobPhase = 'pending' | 'running' | 'completed' | 'failed' | 'cancelled';
export type TerminalPhase = 'completed' | 'failed' | 'cancelled';

const EXACT = new Map<string, JobPhase>(
  Object.entries({
    pending: 'pending',
    submitted: 'pending',
    queued: 'pending',
    waiting: 'pending',
    waiting_to_dispatch: 'pending',
    created: 'pending',
    in_progress: 'running',
    running: 'running',
    executing: 'running',
    processing: 'running',
    dispatched: 'running',
    started: 'running',
    completed: 'completed',
    complete: 'completed',
    success: 'completed',
    succeeded: 'completed',
    successful: 'completed',
    done: 'completed',
    finished: 'completed',
    failed: 'failed',
    failure: 'failed',
    error: 'failed',
    errored: 'failed',
    non_retryable_error: 'failed',
    lost: 'failed',
    cancelled: 'cancelled',
    canceled: 'cancelled',
    interrupted: 'cancelled',
    aborted: 'cancelled',
  } satisfies Record<string, JobPhase>),
);

/** Far past any word a service uses; a longer one is unknown without being normalised (it may be megabytes). */
const MAX_WORD_LENGTH = 100;

/** Maps a status word (any case, `-`, space or `_`); anything unknown is still running. */
export function phaseOfStatus(word: unknown): JobPhase {
  if (typeof word !== 'string' || word.length > MAX_WORD_LENGTH) return 'running';
  const normal = word
    .trim()
    .toLowerCase()
    .replace(/[\s-]+/g, '_');
  const exact = EXACT.get(normal);
  if (exact) return exact;
  if (normal.startsWith('queued') || normal.startsWith('waiting') || normal.startsWith('pending'))
    return 'pending';
  if (normal.endsWith('_error') || normal.startsWith('failed')) return 'failed';
  return 'running';
}

export function isTerminal(phase: JobPhase): phase is TerminalPhase {
  return phase === 'completed' || phase === 'failed' || phase === 'cancelled';
}
