/**
 * Cancelling jobs, on the routes the server has, and what each cancel did. On ComfyUI 0.26 and later one call,
 * `POST /api/jobs/{id}/cancel`, dequeues a pending job or interrupts a running one. Older servers: read the
 * queue, `POST /api/queue {delete}` (pending jobs only on a self-hosted server, and no event), read it again,
 * and send the targeted interrupt `POST /api/interrupt {prompt_id}` to a job still running. A job that is not in
 * the queue afterwards is asked about on its own, so a job that finished meanwhile is `ended`, not `removed`:
 * nothing is concluded from a read that failed. The registry remembers the cancels of a config node, so its
 * awaits tell a job the user cancelled from one that was lost: only a cancel the server confirmed (`removed`,
 * `interrupted`) makes a job it later forgets a cancelled one. No Node-RED inside.
 */
import { ServiceError } from '../../http/errors';
import { setOwn } from '../../boundary/outside';
import type { HttpClient } from '../../http/client';
import { lacksRoute, phaseInQueue, type JobLookup, type LookupAnswer, type QueueRead } from './job-lookup';
import { RecentMap } from './recent-map';

/**
 * `removed`: taken out of the queue, it will never run; `interrupted`: it was running and was told to stop (it
 * ends `cancelled` with its `execution_interrupted`); `ended`: it had ended already (not cancelled); `unknown`:
 * the server does not know it; `unconfirmed`: asked, but what happened could not be read.
 */
export type CancelKind = 'removed' | 'interrupted' | 'ended' | 'unknown' | 'unconfirmed';

export type CancelListener = (promptId: string, kind: CancelKind) => void;

/** What a cancel did to each job it named. */
export interface CancelOutcome {
  /** The service's answer: of `POST /api/queue` (empty on self-hosted servers), or per job of the cancel route. */
  body: unknown;
  removed: string[];
  interrupted: string[];
  /** In no queue when cancelled: ended already, or unknown to the service. */
  notQueued: string[];
  /** What happened to these could not be read: their awaits ask the server. */
  unconfirmed: string[];
}

/** At least this many of the latest cancels are remembered. */
const REMEMBERED = 4096;

export class CancelRegistry {
  private readonly kinds = new RecentMap<string, CancelKind>(REMEMBERED);
  private readonly listeners = new Set<CancelListener>();

  /** Records cancels and tells every listener. */
  note(promptIds: string[], kind: CancelKind): void {
    for (const id of promptIds) {
      this.kinds.set(id, kind);
      for (const listener of [...this.listeners]) {
        try {
          listener(id, kind);
        } catch {
          // a listener's failure is its own; the cancel stands for the others
        }
      }
    }
  }

  /** What the latest cancel of the job did, if it was cancelled. */
  kindOf(promptId: string): CancelKind | undefined {
    return this.kinds.get(promptId);
  }

  /**
   * Whether this config node cancelled the job and the server confirmed it: taken out of the queue, or told to
   * stop while it ran. A cancel whose outcome could not be read, of a job the server did not know or that had
   * ended, was not confirmed: a job the server forgets after it is lost, not cancelled.
   */
  isCancelled(promptId: string): boolean {
    const kind = this.kinds.get(promptId);
    return kind === 'removed' || kind === 'interrupted';
  }

  /** The returned function removes exactly this listener. */
  listen(listener: CancelListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}

/** What a cancel needs of a connection. */
export interface CancelContext {
  http: HttpClient;
  lookup: Pick<JobLookup, 'queue' | 'status'>;
  /** Whether the server has `POST /api/jobs/{id}/cancel` (false once it answered without it). */
  cancelRoute(): Promise<boolean>;
  /** The route turned out to be missing (405, or a framework's 404 page). */
  cancelRouteMissing(): void;
  /** Whether a targeted interrupt of a job that is not running is harmless (it interrupts nothing). */
  targetedInterruptSafe(): Promise<boolean>;
  /** Whether this connection's socket or status checks report the job running now. */
  reportedRunning(promptId: string): boolean;
  rest: {
    cancel(promptIds: string[], signal?: AbortSignal): Promise<unknown>;
    interrupt(promptId?: string, signal?: AbortSignal): Promise<unknown>;
  };
}

/** Reads of the queue after a delete that failed are tried this many times more, this far apart. */
const QUEUE_REREADS = 2;
const REREAD_DELAY_MS = 300;

function emptyOutcome(): CancelOutcome {
  return { body: undefined, removed: [], interrupted: [], notQueued: [], unconfirmed: [] };
}

function addTo(outcome: CancelOutcome, id: string, kind: CancelKind): void {
  if (kind === 'removed') outcome.removed.push(id);
  else if (kind === 'interrupted') outcome.interrupted.push(id);
  else if (kind === 'unconfirmed') outcome.unconfirmed.push(id);
  else outcome.notQueued.push(id);
}

/** Cancels the jobs, on the cancel route where the server has it; says what happened to each. */
export async function cancelJobs(
  promptIds: string[],
  context: CancelContext,
  signal?: AbortSignal,
): Promise<CancelOutcome> {
  const before = await context.lookup.queue(signal);
  if (!(await context.cancelRoute())) return deleteAndInterrupt(promptIds, before, context, signal);
  const outcome = emptyOutcome();
  const answers: Record<string, unknown> = {};
  for (const [index, id] of promptIds.entries()) {
    const answer = await cancelOne(id, context, signal);
    if (answer === 'missing') {
      // A server without the route after all: the rest the older way, the answers so far kept.
      context.cancelRouteMissing();
      const rest = await deleteAndInterrupt(promptIds.slice(index), before, context, signal);
      for (const kind of ['removed', 'interrupted', 'notQueued', 'unconfirmed'] as const)
        outcome[kind].push(...rest[kind]);
      outcome.body = index === 0 ? rest.body : answers;
      return outcome;
    }
    setOwn(answers, id, answer.body); // a job id from a msg may be any word, __proto__ too
    addTo(
      outcome,
      id,
      answer.kind === 'cancelled' ? await placeCancelled(id, before, context, signal) : answer.kind,
    );
  }
  outcome.body = answers;
  return outcome;
}

type RouteCancel =
  'missing' | { kind: 'cancelled'; body: unknown } | { kind: 'ended' | 'unconfirmed'; body: unknown };

/** `POST /api/jobs/{id}/cancel`: `{cancelled: true}` for a pending or running job, false for any other. */
async function cancelOne(
  promptId: string,
  context: CancelContext,
  signal?: AbortSignal,
): Promise<RouteCancel> {
  let answer: { status: number; body: unknown; json: boolean };
  try {
    answer = await context.http.json(`/api/jobs/${encodeURIComponent(promptId)}/cancel`, {
      method: 'POST',
      // Cancelling twice is harmless: a job cancelled already answers `cancelled: false`.
      idempotent: true,
      acceptStatus: [404, 405],
      signal,
      action: `cancelling job ${promptId}`,
    });
  } catch (error) {
    if (signal?.aborted) throw error;
    if (error instanceof ServiceError && error.code === 'unauthorized') throw error;
    return { kind: 'unconfirmed', body: undefined };
  }
  if (lacksRoute(answer)) return 'missing';
  const cancelled = (answer.body as { cancelled?: unknown } | undefined)?.cancelled;
  if (answer.status === 200 && cancelled === true) return { kind: 'cancelled', body: answer.body };
  // `false`: it ended already, or the server does not know it.
  return { kind: answer.status === 200 && cancelled === false ? 'ended' : 'unconfirmed', body: answer.body };
}

/** A job the cancel route cancelled: taken out of the queue (never ran), or interrupted while it ran. */
async function placeCancelled(
  promptId: string,
  before: QueueRead,
  context: CancelContext,
  signal?: AbortSignal,
): Promise<CancelKind> {
  const place = phaseInQueue(before, promptId);
  if (place === 'pending') return 'removed';
  if (place === 'running') return 'interrupted';
  // Not in the queue read before (it came later, or the read failed): a dequeued job is forgotten.
  const answer = await context.lookup.status(promptId, signal);
  if (answer.kind === 'unknown') return 'removed';
  return answer.kind === 'phase' ? 'interrupted' : 'unconfirmed';
}

/**
 * Older servers: delete from the queue, then interrupt what still runs. The queue is read before and after;
 * every job the second read does not list is asked about on its own.
 */
async function deleteAndInterrupt(
  promptIds: string[],
  before: QueueRead,
  context: CancelContext,
  signal?: AbortSignal,
): Promise<CancelOutcome> {
  const outcome = emptyOutcome();
  outcome.body = await context.rest.cancel(promptIds, signal);
  let after = await context.lookup.queue(signal);
  for (let reread = 0; after.kind !== 'read' && reread < QUEUE_REREADS; reread++) {
    await new Promise((resolve) => setTimeout(resolve, REREAD_DELAY_MS));
    signal?.throwIfAborted();
    after = await context.lookup.queue(signal);
  }
  const interrupt = async (id: string): Promise<CancelKind> => {
    try {
      await context.rest.interrupt(id, signal);
      return 'interrupted';
    } catch (error) {
      if (signal?.aborted) throw error;
      return 'unconfirmed';
    }
  };
  for (const id of promptIds) {
    const place = phaseInQueue(after, id);
    let kind: CancelKind;
    if (place === 'running') kind = await interrupt(id);
    // Still waiting after the delete: it was not taken out.
    else if (place === 'pending') kind = 'unconfirmed';
    else if (place === undefined) {
      // The queue cannot be read: the targeted interrupt is sent where it cannot stop another job, a server
      // that takes it (ComfyUI 0.8 and later), or one whose running job is this one as far as this connection
      // knows (an older server stops whatever runs). The awaits ask the server how the job ended.
      if (context.reportedRunning(id) || (await context.targetedInterruptSafe())) await interrupt(id);
      kind = 'unconfirmed';
    } else kind = placeGone(phaseInQueue(before, id), await context.lookup.status(id, signal));
    addTo(outcome, id, kind);
  }
  return outcome;
}

/**
 * A job the queue no longer lists after the delete: forgotten by the server (it was taken out), cancelled
 * (a service whose delete stops running jobs too), or ended by itself before the delete (not cancelled).
 */
function placeGone(before: 'running' | 'pending' | 'absent' | undefined, now: LookupAnswer): CancelKind {
  if (now.kind === 'unknown') return before === 'pending' || before === 'running' ? 'removed' : 'unknown';
  if (now.kind !== 'phase') return 'unconfirmed';
  if (now.phase === 'cancelled') return before === 'running' ? 'interrupted' : 'removed';
  if (now.phase === 'completed' || now.phase === 'failed') return 'ended';
  // The queue and the job's own route disagree (it moved between the two reads): its awaits will see.
  return 'unconfirmed';
}
