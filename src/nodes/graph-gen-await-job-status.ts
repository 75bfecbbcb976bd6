/**
 * What a graph-gen-await-job node shows under it (graph-gen-await-job.ts sets it, at most every 150 ms), read
 * from its trackers: the running job's node and step, else the place of the nearest waiting job or the queue;
 * the socket's trouble (one server) or how many of the pool's servers are up; with no job, the last job's
 * outcome. Apart from the node because it only reads: it holds none of the node's state.
 */
import type { NodeStatus } from 'node-red';
import type { JobTracker, JobView } from '../generation/jobs/job-tracker';
import type { ServerPool } from '../generation/pool/server-pool';
import { statusFailed, statusOk, statusWaiting, type Texts } from './node-helpers';

/** The status of an await-job node with a server or pool (`pool`), its trackers, and the last job's outcome. */
export function awaitStatus(
  trackers: JobTracker[],
  pool: ServerPool | undefined,
  lastOutcome: NodeStatus,
  text: Texts,
  poolText: Texts,
): NodeStatus {
  // One server: its socket's trouble; a pool: how many of its servers are up (server-pool.ts).
  if (!pool && trackers[0]?.connectionState === 'unauthorized')
    return statusFailed(text('status.unauthorized'));
  let jobs = 0;
  let latest: JobView | undefined;
  let nearestAhead: number | undefined;
  let queueRemaining: number | undefined;
  for (const tracker of trackers) {
    const summary = tracker.summary();
    jobs += summary.jobs;
    latest ??= summary.latestRunning;
    if (summary.nearestAhead !== undefined)
      nearestAhead = Math.min(nearestAhead ?? Infinity, summary.nearestAhead);
    if (summary.jobs > 0 && tracker.queueRemaining !== undefined)
      queueRemaining = (queueRemaining ?? 0) + tracker.queueRemaining;
  }
  const down = pool?.downCount ?? 0;
  const poolTrouble =
    pool && down > 0 ? poolText('status.servers-up', { up: pool.size - down, total: pool.size }) : undefined;
  if (jobs === 0)
    return poolTrouble ? (down === pool!.size ? statusFailed : statusWaiting)(poolTrouble) : lastOutcome;
  if (latest) {
    const step = latest.step ? ` ${latest.step.value}/${latest.step.max}` : '';
    const label = `${text('status.running')} ${latest.node ?? ''}${step}`;
    return statusOk(label.replace(/\s+/g, ' ').trim());
  }
  if (poolTrouble) return statusWaiting(poolTrouble);
  if (!pool && trackers[0]?.connectionState === 'down') return statusWaiting(text('status.reconnecting'));
  if (nearestAhead !== undefined) return statusWaiting(text('status.ahead', { ahead: nearestAhead }));
  return statusWaiting(`${text('status.queued')} ${queueRemaining ?? jobs}`);
}
