/**
 * One item, or an array once there are more: what a table of 10,000 jobs keeps per job where nearly every job
 * has one (one listener on the socket, one await in the book). An array of one costs a job about 60 bytes more
 * (the array and its backing store). The items are objects, never arrays, so the two are told apart. No
 * Node-RED inside.
 */
export type OneOrMany<T extends object> = T | T[];

/** `present` with `item` added at the end. */
export function withItem<T extends object>(present: OneOrMany<T> | undefined, item: T): OneOrMany<T> {
  if (present === undefined) return item;
  if (!Array.isArray(present)) return [present, item];
  present.push(item);
  return present;
}

/**
 * `present` without one `item`: `found` false when it was not there; `rest` undefined when none is left, the
 * last one itself when one is.
 */
export function withoutItem<T extends object>(
  present: OneOrMany<T> | undefined,
  item: T,
): { found: boolean; rest: OneOrMany<T> | undefined } {
  if (present === item) return { found: true, rest: undefined };
  const index = Array.isArray(present) ? present.indexOf(item) : -1;
  if (!Array.isArray(present) || index < 0) return { found: false, rest: present };
  present.splice(index, 1);
  return { found: true, rest: present.length === 1 ? present[0] : present };
}

/** The items in order, as an array (a copy when there are more: a call may add or remove some meanwhile). */
export function itemsOf<T extends object>(items: OneOrMany<T>): readonly T[] {
  return Array.isArray(items) ? [...items] : [items];
}
