/**
 * A map that remembers at least its `capacity` most recently set keys (and at most twice as many), in
 * constant time per call. No Node-RED inside.
 *
 * Why not one Map that deletes its oldest key on overflow: `map.keys().next()` walks from the start of V8's
 * table past every entry deleted since the last rehash, so with 4,096 entries each overflowing `set` cost
 * about 1.5 µs against 0.1 µs here, paid for every job that ends when 10,000 end at once. Here full
 * generations are dropped whole: when the current one holds `capacity` keys it becomes the previous one and
 * the one before it goes.
 */
export class RecentMap<K, V> {
  private current = new Map<K, V>();
  private previous = new Map<K, V>();

  constructor(private readonly capacity: number) {}

  set(key: K, value: V): void {
    this.previous.delete(key);
    this.current.set(key, value);
    if (this.current.size >= this.capacity) {
      this.previous = this.current;
      this.current = new Map();
    }
  }

  get(key: K): V | undefined {
    return this.current.has(key) ? this.current.get(key) : this.previous.get(key);
  }

  has(key: K): boolean {
    return this.current.has(key) || this.previous.has(key);
  }

  delete(key: K): void {
    this.current.delete(key);
    this.previous.delete(key);
  }

  get size(): number {
    return this.current.size + this.previous.size;
  }
}
