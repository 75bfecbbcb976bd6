/**
 * A small key-value state kept on disk as a journal: each change is a line appended to a file (`{"k": key, "v":
 * value}` sets, `{"k": key}` deletes), in batches, so a change costs its own few hundred bytes however much is
 * kept. One write is in flight at a time, and every change made meanwhile goes in the next one: a lone change is
 * on its way within a turn of the event loop, a burst of thousands costs a few writes. When the deleted lines
 * outweigh the kept state the file is rewritten with the kept state only (to a temporary file, then renamed over
 * it). What survives what: a clean stop (`flush`) loses nothing; a kill (SIGKILL, a power cut) loses the changes
 * of the write under way and those waiting for it (milliseconds' worth).
 *
 * The file is outside data when read back (another release, a hand, a disk wrote it), so reading is a boundary:
 * each line is parsed by readJsonText and its value by the owner's `readValue`, and one rule bounds both sides:
 * a change larger than `maxLineBytes` is refused when set (the caller hears why at once) and skipped when read;
 * the kept state is at most `maxBytes`, and a file larger than that (history, or an earlier release's) is read
 * line by line, its newest entries kept, and rewritten. Files are the owner's only (private-files.ts).
 * No Node-RED inside.
 */
import { appendFile, mkdir, open, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { errorText, readJsonText, ownValue, readOk, type Read } from '../boundary/outside';
import { isRecord } from '../boundary/json-values';
import { PRIVATE_FILE_MODE, PRIVATE_FOLDER_MODE, narrowIfPresent } from './private-files';

export interface JournalOptions<V> {
  /** A change waits this long for others to be written with it (default 0: the next turn of the event loop). */
  batchMs?: number;
  /** The kept state holds at most this many bytes of lines (default MAX_KEPT_BYTES); a larger file is compacted. */
  maxBytes?: number;
  /** A change larger than this is neither written nor read (default MAX_LINE_BYTES). */
  maxLineBytes?: number;
  /** What a kept value read back is: the typed value, or why not (default: any JSON value). */
  readValue?: (value: unknown) => Read<V>;
  /** Reports what could not be read or written (never throws). */
  log?: (message: string) => void;
}

/** One change (a line) at most, in bytes. */
export const MAX_LINE_BYTES = 16 * 1024 * 1024;
/** The kept state at most, in bytes of its lines. */
export const MAX_KEPT_BYTES = 256 * 1024 * 1024;
/** The file is rewritten when it holds this many lines more than the kept state, and at least that many. */
const COMPACT_SLACK = 1000;

/** Whether a set was kept, or why not (it is then not written, and the key holds nothing). */
export type Kept = { ok: true } | { ok: false; reason: string };

interface Entry<V> {
  value: V;
  /** Bytes of its line, its end included. */
  bytes: number;
}

/** What a read of the file passed over, told once in one sentence. */
interface Skipped {
  tooLong: number;
  unreadable: number;
  firstReason?: string;
  dropped: number;
}

export class Journal<V> {
  /** Writes and bytes written by every journal of this process (benchmarks read them). */
  static readonly written = { writes: 0, bytes: 0 };
  /** In the order last set: the first is the oldest. */
  private readonly state = new Map<string, Entry<V>>();
  private stateBytes = 0;
  private pending: string[] = [];
  private timer?: NodeJS.Timeout;
  private writing?: Promise<void>;
  /** Lines in the file (kept state and history). */
  private lines = 0;
  private readonly batchMs: number;
  private readonly maxBytes: number;
  private readonly maxLineBytes: number;
  private readonly readValue: (value: unknown) => Read<V>;
  private readonly log?: (message: string) => void;
  private closed = false;
  /** The file ends in a line cut short (a kill mid-write): the next write rewrites it whole. */
  private damaged = false;
  /** Writes that reached the disk so far (for tests). */
  writes = 0;

  private constructor(
    readonly file: string,
    options: JournalOptions<V>,
  ) {
    this.batchMs = options.batchMs ?? 0;
    this.maxBytes = options.maxBytes ?? MAX_KEPT_BYTES;
    this.maxLineBytes = options.maxLineBytes ?? MAX_LINE_BYTES;
    this.readValue = options.readValue ?? ((value) => readOk(value as V));
    this.log = options.log;
  }

  /** Opens the journal at `file`, reading what it kept (a missing file is an empty state). */
  static async open<V>(file: string, options: JournalOptions<V> = {}): Promise<Journal<V>> {
    const journal = new Journal<V>(file, options);
    await journal.load();
    return journal;
  }

  get size(): number {
    return this.state.size;
  }

  get(key: string): V | undefined {
    return this.state.get(key)?.value;
  }

  entries(): Array<[string, V]> {
    return [...this.state].map(([key, entry]) => [key, entry.value]);
  }

  /**
   * Keeps `value` under `key`, unless its line is larger than a change may be or the kept state would pass its
   * bound: then nothing is written (what the key held before is forgotten) and the answer says why.
   */
  set(key: string, value: V): Kept {
    let line: string;
    try {
      line = JSON.stringify({ k: key, v: value });
    } catch (error) {
      this.delete(key);
      return { ok: false, reason: `it cannot be written as JSON (${errorText(error)})` };
    }
    const bytes = Buffer.byteLength(line);
    const refused = this.refusal(bytes, this.stateBytes - (this.state.get(key)?.bytes ?? 0));
    if (refused) {
      this.delete(key);
      return { ok: false, reason: refused };
    }
    this.put(key, { value, bytes: bytes + 1 });
    this.append(line);
    return { ok: true };
  }

  delete(key: string): void {
    if (!this.forget(key)) return;
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
    this.stateBytes = 0;
    await this.writing?.catch(() => undefined);
    await rm(this.file, { force: true }).catch((error: unknown) => this.report('remove', error));
  }

  /** The one rule on sizes, for what is set and for what is read: a line, and the state it joins. */
  private refusal(bytes: number, otherBytes: number): string | undefined {
    if (bytes > this.maxLineBytes)
      return `it is ${bytes} bytes as JSON, more than ${this.maxLineBytes} bytes, the most one kept entry may be`;
    if (otherBytes + bytes + 1 > this.maxBytes)
      return `the ${otherBytes} bytes kept already and its ${bytes} would pass the ${this.maxBytes} kept at most`;
    return undefined;
  }

  /** Sets an entry as the newest. */
  private put(key: string, entry: Entry<V>): void {
    this.forget(key);
    this.state.set(key, entry);
    this.stateBytes += entry.bytes;
  }

  private forget(key: string): boolean {
    const entry = this.state.get(key);
    if (!entry) return false;
    this.state.delete(key);
    this.stateBytes -= entry.bytes;
    return true;
  }

  private append(line: string): void {
    if (this.closed) return;
    this.pending.push(line);
    // A write under way takes what waits when it ends; otherwise one is started after the batch wait.
    if (this.writing || this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.write();
    }, this.batchMs);
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
    // The modes apply when made; one made before is narrowed when opened (load).
    await mkdir(path.dirname(this.file), { recursive: true, mode: PRIVATE_FOLDER_MODE });
    const text = `${batch.join('\n')}\n`;
    await appendFile(this.file, text, { mode: PRIVATE_FILE_MODE });
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
    await mkdir(path.dirname(this.file), { recursive: true, mode: PRIVATE_FOLDER_MODE });
    const temporary = `${this.file}.${process.pid}.tmp`;
    const lines = [...this.state].map(([k, entry]) => JSON.stringify({ k, v: entry.value })).join('\n');
    const text = lines ? `${lines}\n` : '';
    const handle = await open(temporary, 'w', PRIVATE_FILE_MODE);
    try {
      // A temporary file left by a kill keeps the mode it was made with.
      await handle.chmod(PRIVATE_FILE_MODE);
      await handle.writeFile(text);
      // The data first, then the name: a kill between them leaves the old file.
      await handle.sync();
    } finally {
      await handle.close();
    }
    this.wrote(text);
    await rename(temporary, this.file);
    this.lines = this.state.size;
  }

  /**
   * Replays the file line by line, a line held in memory only up to `maxLineBytes` (a longer one is passed
   * over to its end), the state only up to `maxBytes` (the oldest entries go first). A file that had more than
   * it could give, or that is larger than `maxBytes`, is rewritten with what was kept.
   */
  private async load(): Promise<void> {
    await narrowIfPresent(path.dirname(this.file), PRIVATE_FOLDER_MODE).catch((error: unknown) =>
      this.report('make private the folder of', error),
    );
    let handle;
    try {
      handle = await open(this.file, 'r');
    } catch (error) {
      if ((error as { code?: unknown } | null)?.code !== 'ENOENT') this.report('read', error);
      return;
    }
    const skipped: Skipped = { tooLong: 0, unreadable: 0, dropped: 0 };
    let fileBytes = 0;
    try {
      await handle.chmod(PRIVATE_FILE_MODE).catch((error: unknown) => this.report('make private', error));
      let parts: Buffer[] = [];
      let partBytes = 0;
      let tooLong = false;
      for await (const chunk of handle.createReadStream({ autoClose: false }) as AsyncIterable<Buffer>) {
        fileBytes += chunk.length;
        for (let start = 0; start < chunk.length;) {
          const newline = chunk.indexOf(0x0a, start);
          const end = newline === -1 ? chunk.length : newline;
          if (!tooLong && partBytes + end - start > this.maxLineBytes) {
            tooLong = true;
            parts = [];
            partBytes = 0;
          }
          if (!tooLong) {
            parts.push(chunk.subarray(start, end));
            partBytes += end - start;
          }
          if (newline === -1) break;
          this.takeLine(tooLong ? undefined : Buffer.concat(parts, partBytes), skipped);
          parts = [];
          partBytes = 0;
          tooLong = false;
          start = newline + 1;
        }
      }
      if (tooLong || partBytes > 0) {
        // A last line without its end: cut short by a kill mid-write. An append after it would be glued to it,
        // so the file is written whole next time.
        this.takeLine(tooLong ? undefined : Buffer.concat(parts, partBytes), skipped);
        this.damaged = true;
      }
    } catch (error) {
      this.report('read', error);
    } finally {
      await handle.close().catch(() => undefined);
    }
    this.tellSkipped(skipped);
    if (skipped.tooLong + skipped.dropped > 0 || fileBytes > this.maxBytes)
      await this.rewrite().catch((error: unknown) => this.report('compact', error));
  }

  /** One line read back: a set or a delete when its shape and value are readable, else counted in `skipped`. */
  private takeLine(line: Buffer | undefined, skipped: Skipped): void {
    this.lines += 1;
    if (line === undefined) {
      skipped.tooLong += 1;
      return;
    }
    if (line.length === 0) return;
    const change = readJsonText(line.toString('utf8'));
    const key = change.ok && isRecord(change.value) ? ownValue(change.value, 'k') : undefined;
    if (!change.ok || typeof key !== 'string') {
      skipped.unreadable += 1;
      skipped.firstReason ??= change.ok ? 'a line is not a change' : `a line: ${change.reason}`;
      this.damaged = true;
      return;
    }
    const record = change.value as Record<string, unknown>;
    if (!Object.hasOwn(record, 'v')) {
      this.forget(key);
      return;
    }
    const value = this.readValue(record.v);
    if (!value.ok) {
      // What the key held before is replaced by what cannot be read: neither stands.
      this.forget(key);
      skipped.unreadable += 1;
      skipped.firstReason ??= `an entry: ${value.reason}`;
      return;
    }
    this.put(key, { value: value.value, bytes: line.length + 1 });
    while (this.stateBytes > this.maxBytes) {
      const [oldest] = this.state.keys();
      this.forget(oldest);
      skipped.dropped += 1;
    }
  }

  private tellSkipped(skipped: Skipped): void {
    const parts: string[] = [];
    if (skipped.tooLong > 0)
      parts.push(`${skipped.tooLong} entries larger than the ${this.maxLineBytes} bytes one may be`);
    if (skipped.unreadable > 0)
      parts.push(`${skipped.unreadable} lines that could not be read (${skipped.firstReason ?? ''})`);
    if (skipped.dropped > 0)
      parts.push(`the ${skipped.dropped} oldest entries, past the ${this.maxBytes} bytes kept at most`);
    if (parts.length > 0) this.log?.(`${this.file}: left out ${parts.join('; ')}`);
  }

  private report(what: string, error: unknown): void {
    this.log?.(`could not ${what} ${this.file}: ${errorText(error)}`);
  }
}
