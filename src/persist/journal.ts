/**
 * A small key-value state kept on disk as a journal: each change is a line appended to a file (`{"k": key, "v":
 * value}` sets, `{"k": key}` deletes), in batches, so a change costs its own few hundred bytes however much is
 * kept. One write is in flight at a time, and every change made meanwhile goes in the next one: a lone change is
 * on its way within a turn of the event loop, a burst of thousands costs a few writes. When the deleted lines
 * outweigh the kept state the file is rewritten with the kept state only (to a temporary file, then renamed over
 * it). Reading at start-up replays the lines; a last line cut short by a kill is skipped, a file past `maxBytes`
 * is refused. What survives what: a clean stop (`flush`) loses nothing; a kill (SIGKILL, a power cut) loses the
 * changes of the write under way and those waiting for it (milliseconds' worth). No Node-RED inside.
 */
import { appendFile, mkdir, open, rename, rm, writeFile } from 'node:fs/promises';
import { createReadStream, statSync } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';

export interface JournalOptions {
  /** A change waits this long for others to be written with it (default 0: the next turn of the event loop). */
  batchMs?: number;
  /** A file larger than this is not read (default 256 MiB): it cannot be this package's. */
  maxBytes?: number;
  /** A line larger than this is skipped when read (default 16 MiB). */
  maxLineBytes?: number;
  /** Reports what could not be read or written (never throws). */
  log?: (message: string) => void;
}

const DEFAULTS = { batchMs: 0, maxBytes: 256 * 1024 * 1024, maxLineBytes: 16 * 1024 * 1024 };
/** The file is rewritten when it holds this many lines more than the kept state, and at least that many. */
const COMPACT_SLACK = 1000;

export class Journal<V> {
  /** Writes and bytes written by every journal of this process (benchmarks read them). */
  static readonly written = { writes: 0, bytes: 0 };
  private readonly state = new Map<string, V>();
  private pending: string[] = [];
  private timer?: NodeJS.Timeout;
  private writing?: Promise<void>;
  /** Lines in the file (kept state and history). */
  private lines = 0;
  private readonly options: Required<Omit<JournalOptions, 'log'>> & Pick<JournalOptions, 'log'>;
  private closed = false;
  /** The file ends in a line cut short (a kill mid-write): the next write rewrites it whole. */
  private damaged = false;
  /** Writes that reached the disk so far (for tests). */
  writes = 0;

  private constructor(
    readonly file: string,
    options: JournalOptions,
  ) {
    this.options = { ...DEFAULTS, ...options };
  }

  /** Opens the journal at `file`, reading what it kept (a missing file is an empty state). */
  static async open<V>(file: string, options: JournalOptions = {}): Promise<Journal<V>> {
    const journal = new Journal<V>(file, options);
    await journal.load();
    return journal;
  }

  get size(): number {
    return this.state.size;
  }

  get(key: string): V | undefined {
    return this.state.get(key);
  }

  entries(): Array<[string, V]> {
    return [...this.state];
  }

  set(key: string, value: V): void {
    this.state.set(key, value);
    this.append(JSON.stringify({ k: key, v: value }));
  }

  delete(key: string): void {
    if (!this.state.delete(key)) return;
    this.append(JSON.stringify({ k: key }));
  }

  /** Writes what is pending now; resolves when it is on disk. */
  async flush(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    while (this.writing || this.pending.length > 0) {
      if (this.writing) await this.writing;
      else await this.write();
    }
  }

  /** Writes what is pending and stops writing. */
  async close(): Promise<void> {
    await this.flush();
    this.closed = true;
  }

  /** Forgets everything and removes the file (the node that kept it was removed from the flows). */
  async destroy(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    this.pending = [];
    this.state.clear();
    await this.writing?.catch(() => undefined);
    await rm(this.file, { force: true }).catch((error: unknown) => this.report('remove', error));
  }

  private append(line: string): void {
    if (this.closed) return;
    this.pending.push(line);
    // A write under way takes what waits when it ends; otherwise one is started after the batch wait.
    if (this.writing || this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.write();
    }, this.options.batchMs);
  }

  private write(): Promise<void> {
    if (this.writing) return this.writing;
    const batch = this.pending;
    this.pending = [];
    if (batch.length === 0) return Promise.resolve();
    const compact = this.damaged || this.lines + batch.length > 2 * this.state.size + COMPACT_SLACK;
    this.damaged = false;
    this.writing = (compact ? this.rewrite() : this.appendLines(batch))
      .catch((error: unknown) => this.report('write', error))
      .finally(() => {
        this.writing = undefined;
        if (this.pending.length > 0 && !this.timer && !this.closed) void this.write();
      });
    return this.writing;
  }

  private async appendLines(batch: string[]): Promise<void> {
    await mkdir(path.dirname(this.file), { recursive: true });
    const text = `${batch.join('\n')}\n`;
    await appendFile(this.file, text);
    this.lines += batch.length;
    this.wrote(text);
  }

  /** Counts a write that reached the disk: this journal's, and every journal's (in bytes) for benchmarks. */
  private wrote(text: string): void {
    this.writes += 1;
    Journal.written.writes += 1;
    Journal.written.bytes += Buffer.byteLength(text);
  }

  /** The kept state only, written beside the file and renamed over it: a kill leaves one or the other whole. */
  private async rewrite(): Promise<void> {
    await mkdir(path.dirname(this.file), { recursive: true });
    const temporary = `${this.file}.${process.pid}.tmp`;
    const lines = [...this.state].map(([k, v]) => JSON.stringify({ k, v })).join('\n');
    const text = lines ? `${lines}\n` : '';
    await writeFile(temporary, text);
    this.wrote(text);
    // The data first, then the name: a kill between them leaves the old file.
    const handle = await open(temporary, 'r+');
    await handle.sync().finally(() => handle.close());
    await rename(temporary, this.file);
    this.lines = this.state.size;
  }

  private async load(): Promise<void> {
    let size: number;
    try {
      size = statSync(this.file).size;
    } catch {
      return;
    }
    if (size > this.options.maxBytes) {
      this.report('read', new Error(`the file is ${size} bytes, more than ${this.options.maxBytes}`));
      return;
    }
    const lines = createInterface({ input: createReadStream(this.file, 'utf8'), crlfDelay: Infinity });
    for await (const line of lines) {
      this.lines += 1;
      if (line.length === 0 || line.length > this.options.maxLineBytes) continue;
      let change: { k?: unknown; v?: unknown };
      try {
        change = JSON.parse(line) as typeof change;
      } catch {
        // A line cut short by a kill mid-write: the changes before it stand, and an append after it would be
        // glued to it, so the file is written whole next time.
        this.damaged = true;
        continue;
      }
      if (typeof change?.k !== 'string') continue;
      if ('v' in change) this.state.set(change.k, change.v as V);
      else this.state.delete(change.k);
    }
  }

  private report(what: string, error: unknown): void {
    this.options.log?.(
      `could not ${what} ${this.file}: ${error instanceof Error ? error.message : String(error)}`,
    );
  }
}
