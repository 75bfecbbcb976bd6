/**
 * Which member of a pool a job goes to: the pure choice, from what the pool knows of each member now. A member is
 * up (its socket is open or it answered lately), unknown (nothing heard yet) or down (its socket is down, or its
 * last request failed to reach it); able or not to run the workflow (needs.ts); and has some jobs ahead (its queue
 * as last reported, plus the jobs this pool sent it since). The order to try them in:
 *
 * - `soonest` (the default): those up, fewest jobs ahead first; ties take turns (the one after the last chosen);
 * - `turns`: those up, in turns, whatever their queues;
 * - `first`: those up, in the listed order (the first is used while it is up: failover only);
 *
 * then those unknown, in the listed order, then those down (a last resort: a socket that is down does not always
 * mean requests fail). A member that cannot run the workflow is never in the order. No I/O; runs on every submit,
 * so it allocates little: a pool has at most MAX_POOL_MEMBERS members.
 */
export type PoolStrategy = 'soonest' | 'turns' | 'first';

export const POOL_STRATEGIES: readonly PoolStrategy[] = ['soonest', 'turns', 'first'];

/** The most members a pool lists (the pool's editor has as many slots). */
export const MAX_POOL_MEMBERS = 8;

export type Reachability = 'up' | 'unknown' | 'down';

/** What the pool knows of one member when it chooses. */
export interface MemberView {
  reachability: Reachability;
  /** Whether it has what the workflow needs (or cannot say: a dialect without node definitions). */
  able: boolean;
  /** Jobs waiting or running there, as far as the pool knows. */
  ahead: number;
}

/** The strategy a setting names; anything else is the default. */
export function strategyOf(value: unknown): PoolStrategy {
  return POOL_STRATEGIES.includes(value as PoolStrategy) ? (value as PoolStrategy) : 'soonest';
}

/**
 * The members' indexes in the order to try them; `turn` is the index the turns start from (the one after the last
 * chosen). Members not able are left out.
 */
export function orderToTry(views: readonly MemberView[], strategy: PoolStrategy, turn: number): number[] {
  const count = views.length;
  const up: number[] = [];
  const unknown: number[] = [];
  const down: number[] = [];
  // In turn order (from `turn`, wrapping) for soonest and turns; in listed order for first.
  const start = strategy === 'first' || count === 0 ? 0 : ((turn % count) + count) % count;
  for (let step = 0; step < count; step++) {
    const index = (start + step) % count;
    const view = views[index];
    if (!view.able) continue;
    if (view.reachability === 'up') up.push(index);
    else if (view.reachability === 'unknown') unknown.push(index);
    else down.push(index);
  }
  // A stable sort keeps turn order among equals: ties take turns.
  if (strategy === 'soonest' && up.length > 1) up.sort((a, b) => views[a].ahead - views[b].ahead);
  if (strategy !== 'first') {
    unknown.sort((a, b) => a - b);
    down.sort((a, b) => a - b);
  }
  return up.concat(unknown, down);
}
