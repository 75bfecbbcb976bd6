/**
 * Reading the socket's frames: JSON text frames and binary ones (frames.ts) into job events, a key they echo
 * removed, and each event handed on by what it is: a job's event by its `prompt_id`, the queue's `status`, a
 * `notification`, the server's `feature_flags`. Binary previews and texts without a `prompt_id` (types 1 and 3)
 * go to the one job executing, which only the events tell. Progress-only frames are skipped unread while no
 * await wants them, and `progress` frames then read at most one per PROGRESS_READ_MS.
 * The boundary of the socket: what a frame holds is read here (src/boundary/outside.ts), and only typed values
 * go on. Never throws: a frame that cannot be read is dropped with a reason; when it names a job (an `executed`
 * nested too deep), the job is told it lost an event (UNREADABLE_EVENT), so what it made is asked of the server
 * rather than reported whole. A job id is what job-ids.ts says one is; the jobs seen executing are
 * at most MAX_EXECUTING. No Node-RED inside.
 */
import type WebSocket from 'ws';
import { SecretSearch, removeSecrets } from '../../http/errors';
import { ownValue, readJsonText } from '../../boundary/outside';
import { isRecord } from '../../boundary/json-values';
import { parseBinaryFrame } from './frames';
import { jobIdOf } from './job-ids';
import type { SocketEvent, SocketStats } from './socket-events';

/** The event a job is given for a frame of it that could not be read: it lost an event. */
export const UNREADABLE_EVENT = 'unreadable_frame';
/**
 * Jobs seen executing at most. A server never runs more at once than a cloud key's few; past this, which one a
 * prompt-less frame belongs to is not known until the queue is empty again.
 */
export const MAX_EXECUTING = 64;
/** An event type longer than this is no type word. */
const MAX_TYPE = 100;

/** Where read frames go (the socket manager). */
export interface FrameSink {
  /** Whether an await wants progress-only events now; while none does, such frames are skipped unread. */
  readonly progressWanted: boolean;
  /** The connection the frames come on (counted from 1). */
  readonly epoch: number;
  job(promptId: string, event: SocketEvent): void;
  /**
   * A `status` frame: the queue count, and the count of the one before on this connection (`previous`), undefined
   * for the first, or after a text frame that could not be read (it may have been one).
   */
  status(
    queueRemaining: number | undefined,
    data: Record<string, unknown>,
    previous: number | undefined,
  ): void;
  notification(text: string, data: Record<string, unknown>): void;
  features(data: Record<string, unknown>): void;
  drop(reason: string): void;
}

const TERMINAL_EVENTS = new Set(['execution_success', 'execution_error', 'execution_interrupted']);
/**
 * Frames that only feed progress output: while no await wants progress they are not parsed at all (a job's
 * live previews and per-node step states are most of the frames a busy server sends).
 */
const PROGRESS_ONLY_TEXT = new Set(['progress_state']);
/**
 * How a progress-only text frame starts, byte for byte, as ComfyUI writes it (Python's json.dumps, spaced) and
 * as a compact writer would: a frame that starts so is skipped without being decoded (a progress_state lists
 * every node of the workflow, twenty of them a job). A frame written otherwise is parsed, then skipped.
 */
const PROGRESS_ONLY_STARTS = [...PROGRESS_ONLY_TEXT].flatMap((type) => [
  Buffer.from(`{"type": "${type}"`),
  Buffer.from(`{"type":"${type}"`),
]);
const PROGRESS_ONLY_BINARY = new Set([1, 3, 4]);
/**
 * `progress` frames (a sampler's steps, one a step) feed progress output, and also the step an await-job node's
 * status shows and the running state of a job whose start was missed. While no await wants progress they are
 * read at most one per PROGRESS_READ_MS on a socket, the rest skipped unread: a self-hosted server runs one job
 * at a time, so its status is never older than that; a burst of thousands of jobs ending together skips nearly
 * all of them. Matched with the comma, so that `progress_state` never is.
 */
const PROGRESS_STARTS = [Buffer.from('{"type": "progress",'), Buffer.from('{"type":"progress",')];
export const PROGRESS_READ_MS = 100;
/** A text frame's type when it comes first, as the services send it; a frame in another order is parsed. */
const LEADING_TYPE = /^\{\s*"type"\s*:\s*"([a-z_]+)"/;

function startsAsOneOf(buffer: Buffer, starts: Buffer[]): boolean {
  for (const start of starts) if (startsWith(buffer, start)) return true;
  return false;
}

/** Byte by byte: a frame differs from a start within its first bytes, before a native compare's own cost. */
function startsWith(buffer: Buffer, start: Buffer): boolean {
  if (buffer.length < start.length) return false;
  for (let index = 0; index < start.length; index++) if (buffer[index] !== start[index]) return false;
  return true;
}

/** `status` events carry the queue count as `status.exec_info.queue_remaining` or flat. */
function queueRemaining(data: Record<string, unknown>): number | undefined {
  const status = ownValue(data, 'status');
  const info = isRecord(status) ? ownValue(status, 'exec_info') : undefined;
  const nested = isRecord(info) ? ownValue(info, 'queue_remaining') : undefined;
  const value = nested ?? ownValue(data, 'queue_remaining');
  return typeof value === 'number' && Number.isFinite(value) ? value : undefined;
}

/**
 * The `data.prompt_id` of a frame JSON.parse was not given (nested too deep, or not JSON): one pass over its
 * characters, no parse and no recursion, looking only in the top object's `data` object. ComfyUI writes an
 * `executed` event's prompt_id after its output, so the whole text is read.
 */
function promptIdInText(text: string): string | undefined {
  let depth = 0;
  let inData = false;
  let key: string | undefined;
  let afterColon = false;
  for (let index = 0; index < text.length; index++) {
    const code = text.charCodeAt(index);
    if (code === 0x22 /* " */) {
      let end = index + 1;
      let escaped = false;
      for (; end < text.length; end++) {
        const at = text.charCodeAt(end);
        if (at === 0x5c /* \ */) {
          escaped = true;
          end++;
        } else if (at === 0x22) break;
      }
      if (afterColon) {
        if (inData && depth === 2 && key === 'prompt_id') {
          const raw = text.slice(index, end + 1);
          const read = escaped ? readJsonText(raw) : undefined;
          return jobIdOf(read ? (read.ok ? read.value : undefined) : raw.slice(1, -1));
        }
        afterColon = false;
      } else key = text.slice(index + 1, end);
      index = end;
    } else if (code === 0x3a /* : */) afterColon = true;
    else if (code === 0x7b /* { */ || code === 0x5b /* [ */) {
      if (depth === 1 && afterColon && key === 'data' && code === 0x7b) inData = true;
      depth++;
      afterColon = false;
      key = undefined;
    } else if (code === 0x7d /* } */ || code === 0x5d /* ] */) {
      depth--;
      if (depth === 1) inData = false;
    } else if (code === 0x2c /* , */) {
      afterColon = false;
      key = undefined;
    }
  }
  return undefined;
}

export class FrameReader {
  /** The jobs executing now, by their events: prompt-less binary frames belong to the one, if only one. */
  private readonly executing = new Set<string>();
  /** More than MAX_EXECUTING were seen since the queue was last empty: the one executing is not known. */
  private executingUnknown = false;
  /** The queue count of the last `status` frame on this connection, while every text frame since was read. */
  private queueCount?: number;
  /** When a `progress` frame was last read while no await wanted progress (see PROGRESS_READ_MS). */
  private progressReadAt = 0;
  /** The secrets in every form they may be written in, to look for in a frame. */
  private readonly secretSearch: SecretSearch;

  constructor(
    private readonly secrets: string[],
    private readonly maxFrameBytes: number,
    private readonly stats: SocketStats,
    private readonly sink: FrameSink,
  ) {
    this.secretSearch = new SecretSearch(secrets);
  }

  /** The queue is empty: nothing executes, whatever end events were missed. */
  reset(): void {
    this.executing.clear();
    this.executingUnknown = false;
  }

  /** A new connection: nothing is known to execute on it yet, and no count was told on it. */
  newConnection(): void {
    this.reset();
    this.queueCount = undefined;
  }

  read(data: WebSocket.RawData, isBinary: boolean): void {
    this.stats.framesReceived += 1;
    const buffer = Array.isArray(data)
      ? Buffer.concat(data)
      : Buffer.isBuffer(data)
        ? data
        : Buffer.from(data);
    if (isBinary) {
      if (
        !this.sink.progressWanted &&
        buffer.length >= 4 &&
        PROGRESS_ONLY_BINARY.has(buffer.readUInt32BE(0))
      ) {
        this.stats.progressFramesSkipped += 1;
        return;
      }
      this.binary(buffer);
    } else this.text(buffer);
  }

  private text(buffer: Buffer): void {
    if (!this.sink.progressWanted && this.skipsUnread(buffer)) {
      this.stats.progressFramesSkipped += 1;
      return;
    }
    const text = buffer.toString('utf8');
    const read = readJsonText(text);
    if (!read.ok) {
      // It may have been a `status` frame: the next count has none to compare with.
      this.queueCount = undefined;
      this.unreadable(text, buffer.length, `text frame that cannot be read: ${read.reason}`);
      return;
    }
    let message = read.value;
    const type = isRecord(message) ? ownValue(message, 'type') : undefined;
    if (typeof type !== 'string' || type.length > MAX_TYPE) {
      this.queueCount = undefined;
      this.sink.drop('text frame without a type word');
      return;
    }
    if (!this.sink.progressWanted && PROGRESS_ONLY_TEXT.has(type)) {
      this.stats.progressFramesSkipped += 1;
      return;
    }
    // An error message or traceback may echo a key: such an event is passed on without it. Searched in the
    // text decoded for JSON.parse; only a frame with an escape that could hide a key (`\u002B`, `\/`) is
    // decided on its parsed value.
    if (this.secretSearch.mayBeInJson(text)) message = removeSecrets(message, this.secrets);
    const rawData = isRecord(message) ? ownValue(message, 'data') : undefined;
    const data = isRecord(rawData) ? rawData : {};
    if (type === 'status') {
      const queue = queueRemaining(data);
      if (queue === 0) this.reset();
      const previous = this.queueCount;
      this.queueCount = queue;
      this.sink.status(queue, data, previous);
      return;
    }
    if (type === 'feature_flags') {
      this.sink.features(data);
      return;
    }
    if (type === 'notification') {
      // Nested at most MAX_JSON_DEPTH and no larger than its frame: JSON can write it.
      const value = ownValue(data, 'value');
      this.sink.notification(typeof value === 'string' ? value : JSON.stringify(value ?? ''), data);
      return;
    }
    const rawId = ownValue(data, 'prompt_id');
    // No prompt_id: an event of no job (a custom node's, a broadcast).
    if (rawId === undefined || rawId === null || rawId === '') return;
    const promptId = jobIdOf(rawId);
    if (promptId === undefined) {
      this.sink.drop(`${type} event whose prompt_id is not a job id`);
      return;
    }
    this.trackExecuting(type, data, promptId);
    this.sink.job(promptId, { type, data, epoch: this.sink.epoch, bytes: buffer.length });
  }

  /** While no await wants progress: a progress-only frame, or a `progress` frame within PROGRESS_READ_MS of the last read. */
  private skipsUnread(buffer: Buffer): boolean {
    if (startsAsOneOf(buffer, PROGRESS_ONLY_STARTS)) return true;
    if (!startsAsOneOf(buffer, PROGRESS_STARTS)) return false;
    const now = Date.now();
    if (now - this.progressReadAt < PROGRESS_READ_MS) return true;
    this.progressReadAt = now;
    return false;
  }

  /**
   * A text frame that cannot be read is dropped. When it names a job, the job lost an event (its outputs, if
   * it was `executed`): it is told, unless the frame only fed progress.
   */
  private unreadable(text: string, bytes: number, reason: string): void {
    this.sink.drop(reason);
    const leading = LEADING_TYPE.exec(text);
    if (leading && (PROGRESS_ONLY_TEXT.has(leading[1]) || leading[1] === 'progress')) return;
    const promptId = promptIdInText(text);
    if (promptId === undefined) return;
    this.sink.job(promptId, {
      type: UNREADABLE_EVENT,
      data: { prompt_id: promptId },
      epoch: this.sink.epoch,
      bytes,
    });
  }

  /**
   * Binary types 1 and 3 carry no prompt_id: they belong to the job that is executing, which only the events
   * tell. Several at once (a cloud key runs jobs in parallel) and no frame can be placed.
   */
  private trackExecuting(type: string, data: Record<string, unknown>, promptId: string): void {
    if (type === 'execution_start') this.executingNow(promptId);
    else if (type === 'executing') {
      const node = ownValue(data, 'node');
      if (node === null || node === undefined || node === '') this.executing.delete(promptId);
      else this.executingNow(promptId);
    } else if (TERMINAL_EVENTS.has(type)) this.executing.delete(promptId);
  }

  private executingNow(promptId: string): void {
    if (this.executing.has(promptId)) return;
    if (this.executing.size >= MAX_EXECUTING) {
      // The oldest makes room; it may still run, so no frame is placed until the queue is empty again.
      const [oldest] = this.executing;
      this.executing.delete(oldest);
      this.executingUnknown = true;
    }
    this.executing.add(promptId);
  }

  private binary(buffer: Buffer): void {
    const parsed = parseBinaryFrame(buffer, this.maxFrameBytes);
    if (!parsed.ok) {
      if (parsed.unknownType !== undefined) this.stats.unknownBinaryFrames += 1;
      this.sink.drop(parsed.reason);
      return;
    }
    // A text frame carries a node's own words, which may echo a key as a text event does: passed on without it.
    // A preview's metadata is JSON the server wrote: decided on its parsed value.
    const search = this.secretSearch;
    const echoes =
      !search.none &&
      (parsed.frame.type === 3
        ? search.inText(parsed.frame.nodeId) || search.inText(parsed.frame.text)
        : parsed.frame.type === 4 && search.inValue(parsed.frame.metadata));
    const frame = echoes ? removeSecrets(parsed.frame, this.secrets) : parsed.frame;
    const bytes = buffer.length;
    const epoch = this.sink.epoch;
    if (frame.type === 4) {
      const promptId = jobIdOf(ownValue(frame.metadata, 'prompt_id'));
      if (promptId === undefined) {
        this.sink.drop('preview whose metadata has no job id as prompt_id');
        return;
      }
      this.sink.job(promptId, { type: 'preview', data: frame.metadata, frame, epoch, bytes });
      return;
    }
    if (this.executing.size !== 1 || this.executingUnknown) {
      const none = this.executing.size === 0 && !this.executingUnknown;
      if (!none) this.stats.unattributedFrames += 1;
      this.sink.drop(
        `binary frame of type ${frame.type} while ${none ? 'no job is' : 'several jobs are'} executing`,
      );
      return;
    }
    const [promptId] = this.executing;
    const event: SocketEvent =
      frame.type === 1
        ? { type: 'preview', data: { prompt_id: promptId }, frame, epoch, bytes }
        : {
            type: 'text',
            data: { prompt_id: promptId, node: frame.nodeId, text: frame.text },
            frame,
            epoch,
            bytes,
          };
    this.sink.job(promptId, event);
  }
}
