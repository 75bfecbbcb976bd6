/**
 * The shared socket's words (socket-manager.ts): what it tells (a job's events, the connection's state), to
 * whom (a job's listener, every job's listener, a user of the socket), what it counts, and the bounds on what it
 * keeps for jobs nobody awaits yet. Their own module because the socket's parts (frame-reader.ts, kept-events.ts)
 * and the job book speak them too, and none of them may depend on the manager that uses them. No Node-RED inside.
 */
import type { BinaryFrame } from './frames';

export type LogLevel = 'debug' | 'warn';

export type ConnectionState = 'idle' | 'connecting' | 'open' | 'down' | 'unauthorized' | 'closed';

/** A job event: a JSON frame's `{type, data}`, or a binary frame as `preview` / `text`. */
export interface SocketEvent {
  type: string;
  data: Record<string, unknown>;
  /** The parsed binary frame of a `preview` or `text` event. */
  frame?: BinaryFrame;
  /** Which connection (counted from 1) delivered it: a change between two events of a job means a gap. */
  epoch: number;
  /** The frame's size on the wire, for the bound on what is kept. */
  bytes?: number;
}

/**
 * Hears one job's events. An object, not a function: the book subscribes a job's life itself, so 10,000 jobs in
 * flight hold no closure each.
 */
export interface JobListener {
  onEvent(event: SocketEvent): void;
  /** It needs progress-only events (previews, text, progress_state). Read on subscribe and on unsubscribe. */
  readonly progress?: boolean;
}

/** Hears every job's events, whichever job (the job-events node's tap). */
export type EveryJobListener = (promptId: string, event: SocketEvent) => void;

export interface SocketUser {
  /**
   * A `status` event: the queue count when the service gave one, and the count of the one before it on this
   * socket (`previousCount`), undefined for the first of a connection or after a frame that could not be read.
   */
  onQueueStatus?(
    queueRemaining: number | undefined,
    data: Record<string, unknown>,
    previousCount?: number,
  ): void;
  /** A `notification` event's text. */
  onNotification?(text: string, data: Record<string, unknown>): void;
  /** Open, down, unauthorized...; `reconnected` is true when an open follows an earlier connection. */
  onConnectionState?(state: ConnectionState, reconnected: boolean): void;
  onLog?(level: LogLevel, message: string): void;
  /**
   * Jobs this user awaits may want progress-only events (previews, text, progress_state), also the ones kept
   * from before their await. While no user nor listener wants them, such frames are skipped unread.
   */
  progress?: boolean;
}

export interface SocketStats {
  socketsOpened: number;
  framesReceived: number;
  framesDropped: number;
  unknownBinaryFrames: number;
  eventsBuffered: number;
  bufferedEventsDropped: number;
  /** Previews and texts without a prompt_id while no single job was executing: dropped. */
  unattributedFrames: number;
  /** Frames skipped unread because no await wanted progress: progress-only ones, and `progress` ones thinned. */
  progressFramesSkipped: number;
}

export interface BufferLimits {
  /** Events kept per prompt_id nobody awaits yet. */
  eventsPerJob: number;
  /** prompt_ids kept at most (oldest dropped first). */
  jobs: number;
  /** A kept prompt_id is dropped this long after its first event. */
  maxAgeMs: number;
  /** Binary frames larger than this are dropped. */
  maxFrameBytes: number;
  /**
   * Bytes of the events (text and binary frames) kept for all such jobs together; the oldest jobs make room,
   * and an event that still does not fit is dropped (a cloud socket gets every job of the key, awaited or
   * not).
   */
  keptBytes: number;
}
