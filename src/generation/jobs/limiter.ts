/**
 * Runs at most `concurrency` tasks at a time, the rest in arrival order. The job tracker sends its status
 * checks through one, so a reconnect with thousands of awaited jobs does not send thousands of requests at
 * once.
 */
export class Limiter {
  private running = 0;
  private readonly waiting: Array<() => void> = [];

  constructor(private readonly concurrency: number) {}

  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.running >= this.concurrency) await new Promise<void>((resolve) => this.waiting.push(resolve));
    this.running += 1;
    try {
      return await task();
    } finally {
      this.running -= 1;
      this.waiting.shift()?.();
    }
  }

  /** Tasks running now. */
  get active(): number {
    return this.running;
  }
}
