/**
 * Reading the socket's frames: JSON text frames and binary ones (frames.ts) into job events, a key they echo
 * removed, and each event handed on by what it is: a job's event by its `prompt_id`, the queue's `status`, a
 * `notification`, the server's `feature_flags`. Binary previews and texts without a `prompt_id` (types 1 and 3)
 * go to the one job executing, which only the events tell. Progress-only frames are skipped unread while no
 * await wants them. Never throws: a frame that cannot be read is dropped with a reason. No Node-RED inside.
 */
import type WebSocket from 'ws';
import { SecretSearch, removeSecrets } from '../../http/errors';
import { parseBinaryFrame } from './frames';
import type { SocketEvent, SocketStats } from './socket-manager';

/** Where read frames go (the socket manager). */
export interface FrameSink {
  /** Whether an await wants progress-only events now; while none does, such frames are skipped unread. */
  readonly progressWanted: boolean;
  /** The connection the frames come on (counted from 1). */
  readonly epoch: number;
  job(promptId: string, event: SocketEvent): void;
  status(queueRemaining: number | undefined, data: Record<string, unknown>): void;
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
const PROGRESS_ONLY_BINARY = new Set([1, 3, 4]);
/** A text frame's type when it comes first, as the services send it; a frame in another order is parsed. */
const LEADING_TYPE = /^\{\s*"type"\s*:\s*"([a-z_]+)"/;

/** `status` events carry the queue count as `status.exec_info.queue_remaining` or flat. */
function queueRemaining(data: Record<string, unknown>): number | undefined {
  const status = data.status as { exec_info?: { queue_remaining?: unknown } } | undefined;
  const value = status?.exec_info?.queue_remaining ?? data.queue_remaining;
  return typeof value === 'number' && Number.isFinite(value) ? value : undefined;
}

export class FrameReader {
  /** The jobs executing now, by their events: prompt-less binary frames belong to the one, if only one. */
  private readonly executing = new Set<string>();
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

  /** A new connection: nothing is known to execute on it yet. */
  reset(): void {
    this.executing.clear();
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
    const text = buffer.toString('utf8');
    if (!this.sink.progressWanted) {
      const leading = LEADING_TYPE.exec(text);
      if (leading && PROGRESS_ONLY_TEXT.has(leading[1])) {
        this.stats.progressFramesSkipped += 1;
        return;
      }
    }
    let message: unknown;
    try {
      message = JSON.parse(text);
    } catch {
      this.sink.drop('text frame that is not JSON');
      return;
    }
    if (!message || typeof message !== 'object' || typeof (message as { type?: unknown }).type !== 'string') {
      this.sink.drop('text frame without a type');
      return;
    }
    // An error message or traceback may echo a key: such an event is passed on without it. Searched in the
    // text decoded for JSON.parse; only a frame with an escape that could hide a key (`\u002B`, `\/`) is
    // decided on its parsed value.
    if (this.secretSearch.mayBeInJson(text)) message = removeSecrets(message, this.secrets);
    const { type, data: rawData } = message as { type: string; data?: unknown };
    const data =
      rawData && typeof rawData === 'object' && !Array.isArray(rawData)
        ? (rawData as Record<string, unknown>)
        : {};
    if (type === 'status') {
      const queue = queueRemaining(data);
      // An empty queue: nothing executes, whatever end events were missed.
      if (queue === 0) this.executing.clear();
      this.sink.status(queue, data);
      return;
    }
    if (type === 'feature_flags') {
      this.sink.features(data);
      return;
    }
    if (type === 'notification') {
      this.sink.notification(
        typeof data.value === 'string' ? data.value : JSON.stringify(data.value ?? ''),
        data,
      );
      return;
    }
    const promptId = data.prompt_id;
    if (typeof promptId !== 'string' || promptId === '') return;
    this.trackExecuting(type, data, promptId);
    this.sink.job(promptId, { type, data, epoch: this.sink.epoch, bytes: buffer.length });
  }

  /**
   * Binary types 1 and 3 carry no prompt_id: they belong to the job that is executing, which only the events
   * tell. Several at once (a cloud key runs jobs in parallel) and no frame can be placed.
   */
  private trackExecuting(type: string, data: Record<string, unknown>, promptId: string): void {
    if (type === 'execution_start') this.executing.add(promptId);
    else if (type === 'executing') {
      if (data.node === null || data.node === undefined || data.node === '') this.executing.delete(promptId);
      else this.executing.add(promptId);
    } else if (TERMINAL_EVENTS.has(type)) this.executing.delete(promptId);
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
      const promptId = frame.metadata.prompt_id;
      if (typeof promptId !== 'string' || promptId === '') {
        this.sink.drop('preview whose metadata has no prompt_id');
        return;
      }
      this.sink.job(promptId, { type: 'preview', data: frame.metadata, frame, epoch, bytes });
      return;
    }
    if (this.executing.size !== 1) {
      if (this.executing.size > 1) this.stats.unattributedFrames += 1;
      this.sink.drop(
        `binary frame of type ${frame.type} while ${this.executing.size === 0 ? 'no job is' : 'several jobs are'} executing`,
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
