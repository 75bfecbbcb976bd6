/**
 * One request for one v2 job's event stream (`GET /api/v2/jobs/{id}/events`, `Accept: text/event-stream`) and its
 * reading, to how it ended: what v2-event-streams.ts decides the job's next stream from. The answers of the real
 * proxy (../shared/peers/comfy-v2/README.md): 200 `text/event-stream`; 404 `not_found` for a job it does not
 * know; 429 `too_many_streams` with `Retry-After: 5` when its 8 streams are taken (by anyone); 503
 * `upstream_unreachable` while its ComfyUI cannot be reached; 401 without the token. The request goes through the
 * config node's HTTP client, which sends the bearer token and keeps its secrets out of every sentence; the body
 * is read by sse-reader.ts (bounded). No byte for `idleMs` (the answer's head, or the body: the proxy sends a
 * keepalive comment each 15 s) and the request is aborted as dead. No Node-RED inside.
 */
import { errorText, textOf } from '../../../boundary/outside';
import { messageFromBody } from '../../../http/errors';
import type { HttpClient, RawResponse } from '../../../http/client';
import { parseRetryAfter } from '../../../http/retry';
import { SseReader, type SseEvent } from './sse-reader';

/** How one stream's request ended. */
export type StreamEnd =
  /** The server ended the stream. */
  | { kind: 'ended' }
  /** Idle, unreadable or broken while it was read: it ended early. */
  | { kind: 'dropped'; reason: string }
  /** 404: the server does not know the job. */
  | { kind: 'unknown' }
  /** 429: the server's streams are all taken; try none before `afterMs`. */
  | { kind: 'busy'; afterMs: number }
  /** 401 or 403: the token was refused. */
  | { kind: 'refused'; sentence: string }
  /** No stream: a 503, another status, an answer that is no event stream, a network failure. */
  | { kind: 'failed'; reason: string }
  /** Stopped here (`stop`). */
  | { kind: 'stopped' };

export interface JobStreamOptions {
  http: Pick<HttpClient, 'stream' | 'errorBody'>;
  promptId: string;
  idleMs: number;
  /** The wait after a 429 whose Retry-After cannot be read, and the longest one honoured. */
  busyMs: number;
  busyMaxMs: number;
  maxEventBytes: number;
  /** Each SSE event read, until the stream is stopped. */
  onEvent(event: SseEvent): void;
  /** The server opened the stream (a 200 event stream), before its first event. */
  onOpen?(): void;
}

/** The error statuses read here; any other is a failure the HTTP client words. */
const ANSWERED = [401, 403, 404, 429, 500, 502, 503, 504];

export class JobStream {
  private readonly controller = new AbortController();
  private idleTimer?: NodeJS.Timeout;
  private idle = false;
  private stopped = false;
  /** When the server opened it (0 until then). */
  openedAt = 0;
  /** The job's final status came on it (set by its owner). */
  final = false;

  constructor(private readonly options: JobStreamOptions) {}

  /** Aborts the request (its connection is closed) and clears its timer; no event is handed on after. */
  stop(): void {
    this.stopped = true;
    this.disarm();
    this.controller.abort();
  }

  /** Requests the stream and reads it to its end. Never throws. */
  async read(): Promise<StreamEnd> {
    try {
      return await this.requestAndRead();
    } catch (error) {
      return this.stopped ? { kind: 'stopped' } : { kind: 'failed', reason: errorText(error) };
    } finally {
      this.disarm();
    }
  }

  private async requestAndRead(): Promise<StreamEnd> {
    const { promptId } = this.options;
    this.arm();
    let response: RawResponse;
    try {
      response = await this.options.http.stream(`/api/v2/jobs/${encodeURIComponent(promptId)}/events`, {
        headers: { accept: 'text/event-stream' },
        signal: this.controller.signal,
        // Tried again by the owner, with waits of its own: the client repeats only a connection that never left.
        idempotent: false,
        acceptStatus: ANSWERED,
        action: `following the events of job ${promptId}`,
      });
    } catch (error) {
      if (this.stopped) return { kind: 'stopped' };
      if (this.idle) return { kind: 'failed', reason: `no answer within ${this.idleSeconds} s` };
      return { kind: 'failed', reason: errorText(error) };
    }
    if (this.stopped) {
      response.body.destroy();
      return { kind: 'stopped' };
    }
    this.arm();
    if (response.status !== 200) return this.errorStatus(response);
    const type = textOf(firstHeader(response.headers['content-type']), 200) ?? '';
    if (!/^text\/event-stream\b/i.test(type)) {
      response.body.destroy();
      return { kind: 'failed', reason: `the answer is ${type || 'untyped'}, not an event stream` };
    }
    this.openedAt = Date.now();
    this.options.onOpen?.();
    const reader = new SseReader(
      (event) => {
        if (!this.stopped) this.options.onEvent(event);
      },
      { maxEventBytes: this.options.maxEventBytes },
    );
    try {
      // Leaving the loop (a return) destroys the body, which closes the connection.
      for await (const chunk of response.body) {
        if (this.stopped) return { kind: 'stopped' };
        this.arm();
        if (!reader.push(chunk as Buffer))
          return { kind: 'dropped', reason: `unreadable: ${reader.refusal}` };
      }
    } catch (error) {
      if (this.stopped) return { kind: 'stopped' };
      if (this.idle) return { kind: 'dropped', reason: `nothing came for ${this.idleSeconds} s` };
      return { kind: 'dropped', reason: `it broke: ${errorText(error)}` };
    }
    return this.stopped ? { kind: 'stopped' } : { kind: 'ended' };
  }

  /** An error status, its body read for the log's words (bounded and cleaned by the client). */
  private async errorStatus(response: RawResponse): Promise<StreamEnd> {
    const { status } = response;
    const body = await this.options.http.errorBody(response.body).catch(() => undefined);
    if (this.stopped) return { kind: 'stopped' };
    const said = messageFromBody(body);
    const answer = `HTTP ${status}${said ? `: ${said}` : ''}`;
    if (status === 401 || status === 403) {
      return {
        kind: 'refused',
        sentence: `the server refused the event stream of job ${this.options.promptId} (${answer})`,
      };
    }
    if (status === 404) return { kind: 'unknown' };
    if (status === 429) {
      const told = parseRetryAfter(response.headers['retry-after']);
      return { kind: 'busy', afterMs: Math.min(this.options.busyMaxMs, told ?? this.options.busyMs) };
    }
    return { kind: 'failed', reason: answer };
  }

  /** (Re)starts the idle timer: no byte for idleMs and the request is aborted. */
  private arm(): void {
    clearTimeout(this.idleTimer);
    this.idleTimer = setTimeout(() => {
      this.idleTimer = undefined;
      this.idle = true;
      this.controller.abort();
    }, this.options.idleMs);
  }

  private disarm(): void {
    clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
  }

  private get idleSeconds(): number {
    return Math.round(this.options.idleMs / 1000);
  }
}

function firstHeader(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}
