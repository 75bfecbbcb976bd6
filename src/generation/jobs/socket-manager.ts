/**
 * The one WebSocket of a config node, shared by every node that uses it. It owns the socket, its heartbeat
 * and its reconnects; nodes register as users (queue status, notifications, connection state) and subscribe
 * per prompt_id. It carries frames (frame-reader.ts reads them) to the subscribers of their prompt_id
 * (socket-subscriptions.ts); events of a prompt_id nobody awaits yet are kept (kept-events.ts) and replayed in
 * order to every subscriber, so `submit -> delay -> await` loses nothing and two awaits of one job see the same
 * events. It knows nothing of a job's state (job-life.ts does). Past 400 lines: the connection's whole lifecycle
 * (open, heartbeat, backoff, reopen, idle close, close) is one state kept in one place, with the users it serves.
 * No Node-RED inside.
 */
import WebSocket from 'ws';
import { cleanForReport } from '../../http/errors';
import { isNotSent } from '../../http/request-failures';
import { transportFailure } from '../../http/transport';
import { errorText } from '../../boundary/outside';
import { DEFAULT_MAX_FRAME_BYTES } from './frames';
import { FrameReader } from './frame-reader';
import { FramePacer } from './frame-pacing';
import { SocketSubscriptions } from './socket-subscriptions';
import type {
  BufferLimits,
  ConnectionState,
  EveryJobListener,
  JobListener,
  LogLevel,
  SocketStats,
  SocketUser,
} from './socket-events';

export type {
  BufferLimits,
  ConnectionState,
  EveryJobListener,
  JobListener,
  LogLevel,
  SocketEvent,
  SocketStats,
  SocketUser,
} from './socket-events';

export interface SocketManagerOptions {
  /** The service's base address (http/https); the socket goes to the same host with ws/wss at /ws. */
  baseUrl: string;
  /** The API key, sent as `token`; undefined for a self-hosted server. */
  apiKey?: string;
  /** Sent as `token` instead of `apiKey` (a bearer token for servers that take it so); never logged. */
  token?: string;
  /** Sent on the handshake, as on every REST request (the credential's headers). */
  headers?: Record<string, string>;
  /** `ws` options for each connection: TLS settings, or an agent through the proxy (http/transport.ts). */
  connectOptions?: () => WebSocket.ClientOptions;
  /** What a 401 or 403 on the handshake refused, in words ("the bearer token"); default: the API key. */
  credentialName?: string;
  /** Further values never to pass on (the partner key): removed from events that echo them. */
  secrets?: Array<string | undefined>;
  /** The UUID sent as `clientId` (and as `client_id` on submit), kept for the config node's life. */
  clientId: string;
  timings?: Partial<SocketTimings>;
  limits?: Partial<BufferLimits>;
  /** Receives every log line (already redacted); otherwise the first user with `onLog` does. */
  logger?: (level: LogLevel, message: string) => void;
}

export interface SocketTimings {
  /** First reconnect wait ceiling; doubles per failed attempt (full jitter: a random wait below it). */
  backoffBaseMs: number;
  backoffMaxMs: number;
  /** A connection open this long resets the backoff. */
  stableMs: number;
  /** A ping this often; no pong by the next one closes the socket as dead. */
  pingIntervalMs: number;
  /** How long the socket stays open after its last user and subscription leave. */
  graceMs: number;
  handshakeTimeoutMs: number;
}

export class SocketManager {
  static defaultTimings: SocketTimings = {
    backoffBaseMs: 500,
    backoffMaxMs: 30_000,
    stableMs: 60_000,
    pingIntervalMs: 30_000,
    graceMs: 2_000,
    handshakeTimeoutMs: 10_000,
  };

  static defaultLimits: BufferLimits = {
    eventsPerJob: 500,
    jobs: 2_000,
    maxAgeMs: 10 * 60_000,
    maxFrameBytes: DEFAULT_MAX_FRAME_BYTES,
    keptBytes: 64 * 1024 * 1024,
  };

  readonly stats: SocketStats = {
    socketsOpened: 0,
    framesReceived: 0,
    framesDropped: 0,
    unknownBinaryFrames: 0,
    eventsBuffered: 0,
    bufferedEventsDropped: 0,
    unattributedFrames: 0,
    progressFramesSkipped: 0,
  };

  private readonly timings: SocketTimings;
  private readonly limits: BufferLimits;
  private readonly users = new Set<SocketUser>();
  /** Who hears which job's events, and the events kept for jobs nobody awaits yet. */
  private readonly subscriptions: SocketSubscriptions;
  /** Users and listeners that want progress-only events; none: such frames are skipped unread. */
  private progressWanted = 0;
  /** Reads a busy socket a turn of the event loop at a time (frame-pacing.ts). */
  private readonly pacer = new FramePacer();
  private readonly frames: FrameReader;
  private readonly waiters = new Set<{ deadline: number; finish: (open: boolean) => void }>();
  private ws?: WebSocket;
  private currentState: ConnectionState = 'idle';
  private epochCount = 0;
  private attempt = 0;
  private refused = false;
  /** Why the last try failed on the way for good (a certificate not trusted), until a socket opens. */
  private refusedOnTheWay: string | undefined;
  /** The last try reached nothing at the address (refused, no route, no such host): see `unreachable`. */
  private reachedNothing = false;
  private closed = false;
  private readonly secrets: string[];
  private reconnectTimer?: NodeJS.Timeout;
  private reconnectAt = 0;
  private pingTimer?: NodeJS.Timeout;
  private stableTimer?: NodeJS.Timeout;
  private graceTimer?: NodeJS.Timeout;
  private awaitingPong = false;
  private closedSocket?: Promise<void>;
  /** The next reconnect is made at once (see reopen). */
  private reopenAtOnce = false;
  /** What the server said of itself in its `feature_flags` answer (ComfyUI 0.3.43 and later). */
  serverFeatures?: Record<string, unknown>;

  constructor(readonly options: SocketManagerOptions) {
    this.timings = { ...SocketManager.defaultTimings, ...options.timings };
    this.limits = { ...SocketManager.defaultLimits, ...options.limits };
    this.subscriptions = new SocketSubscriptions(this.limits, this.stats, (level, message) =>
      this.log(level, message),
    );
    this.secrets = [options.apiKey, options.token, ...(options.secrets ?? [])].filter(
      (secret): secret is string => typeof secret === 'string' && secret.length > 0,
    );
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- read by the sink's getters on every frame
    const manager = this;
    this.frames = new FrameReader(this.secrets, this.limits.maxFrameBytes, this.stats, {
      get progressWanted() {
        return manager.progressWanted > 0;
      },
      get epoch() {
        return manager.epochCount;
      },
      job: (promptId, event) => this.subscriptions.dispatch(promptId, event),
      status: (queue, data, previous) => {
        for (const user of [...this.users]) this.safely(() => user.onQueueStatus?.(queue, data, previous));
      },
      notification: (text, data) => {
        for (const user of [...this.users]) this.safely(() => user.onNotification?.(text, data));
      },
      features: (data) => (this.serverFeatures = data),
      drop: (reason) => this.drop(reason),
    });
  }

  get state(): ConnectionState {
    return this.currentState;
  }

  /** Counts the connections opened so far; events carry it so a job can tell whether it saw a gap. */
  get epoch(): number {
    return this.epochCount;
  }

  get isOpen(): boolean {
    return this.currentState === 'open';
  }

  /** The socket's address with its token, for connecting only: never log it. */
  private address(): string {
    return socketAddress(
      this.options.baseUrl,
      this.options.clientId,
      this.options.token ?? this.options.apiKey,
    );
  }

  /**
   * Whether the socket is down because its last try reached nothing at the address: the connection was refused,
   * or no route or host was found (no server runs there now). Not for a server that answered the handshake
   * with a refusal (a proxy that passes only REST): that server is there.
   */
  get unreachable(): boolean {
    return this.reachedNothing && this.currentState === 'down';
  }

  /** Opens the socket if needed and waits until it is open, at most `timeoutMs`; false if it is not. */
  async ready(timeoutMs: number): Promise<boolean> {
    if (this.closed) return false;
    if (this.currentState === 'open') return true;
    this.ensureOpen();
    if (this.currentState === 'unauthorized' || this.nextAttemptAfter(Date.now() + timeoutMs)) return false;
    return new Promise<boolean>((resolve) => {
      const waiter = {
        deadline: Date.now() + timeoutMs,
        finish: (open: boolean) => {
          clearTimeout(timer);
          this.waiters.delete(waiter);
          resolve(open);
        },
      };
      const timer = setTimeout(() => waiter.finish(false), timeoutMs);
      this.waiters.add(waiter);
    });
  }

  /** Adds a user; the returned function removes exactly that registration. */
  register(user: SocketUser): () => void {
    this.users.add(user);
    if (user.progress) this.progressWanted += 1;
    this.cancelGrace();
    let registered = true;
    return () => {
      if (!registered) return;
      registered = false;
      if (user.progress) this.progressWanted -= 1;
      this.users.delete(user);
      this.closeWhenUnused();
    };
  }

  /**
   * Sends this job's events to `listener`, first the ones kept while nobody awaited it (in order, before
   * this returns), then live ones, until `unsubscribe`. Opens the socket if needed. While no listener nor user
   * wants progress-only events (`progress`), those frames are not read, nor kept for jobs not awaited yet.
   */
  subscribe(promptId: string, listener: JobListener): void {
    this.subscriptions.add(promptId, listener);
    if (listener.progress) this.progressWanted += 1;
    this.cancelGrace();
    this.ensureOpen();
    this.subscriptions.replay(promptId, listener);
  }

  /**
   * Ends one `subscribe` of this listener to this job (again: nothing). When it was the job's last,
   * `{ ended: true }` also drops the job's later events instead of keeping them for a later await.
   */
  unsubscribe(promptId: string, listener: JobListener, { ended = false }: { ended?: boolean } = {}): void {
    if (!this.subscriptions.remove(promptId, listener, ended)) return;
    if (listener.progress) this.progressWanted -= 1;
    this.closeWhenUnused();
  }

  /**
   * Sends every job's events to `listener` as they come, whoever awaits them (none kept from before). It neither
   * opens the socket nor keeps it open: register a user for that. The returned function stops it.
   */
  watchAll(listener: EveryJobListener): () => void {
    return this.subscriptions.watchAll(listener);
  }

  /** Closes for good (the config node is going); waits until the socket is fully closed. */
  async close(): Promise<void> {
    this.closed = true;
    this.clearTimers();
    this.cancelGrace();
    for (const waiter of [...this.waiters]) waiter.finish(false);
    this.subscriptions.clear();
    await this.closeSocket();
    this.setState('closed');
    this.users.clear();
  }

  /**
   * Opens the socket again at once: the server no longer sends to this one although it stays open (a
   * reconnect under the same clientId whose old connection's cleanup removed the new socket from the server's
   * table, Comfy-Org/ComfyUI#16010). Jobs see it as a reconnect and are checked.
   */
  reopen(): void {
    const ws = this.ws;
    if (this.closed || !ws || ws.readyState !== WebSocket.OPEN) return;
    this.reopenAtOnce = true;
    ws.terminate();
  }

  private ensureOpen(): void {
    if (this.closed || this.ws || this.reconnectTimer) return;
    this.connect();
  }

  private nextAttemptAfter(deadline: number): boolean {
    return !this.ws && this.reconnectTimer !== undefined && this.reconnectAt > deadline;
  }

  private connect(): void {
    this.reachedNothing = false;
    this.setState(this.refused ? 'unauthorized' : 'connecting');
    let ws: WebSocket;
    try {
      ws = new WebSocket(this.address(), {
        ...this.options.connectOptions?.(),
        headers: this.options.headers,
        handshakeTimeout: this.timings.handshakeTimeoutMs,
        perMessageDeflate: false,
        // Larger frames are read and then dropped by the parser, so one bad frame does not cost the socket.
        maxPayload: this.limits.maxFrameBytes * 2 + 1024,
      });
    } catch (error) {
      // A base address that cannot become a socket address will not get better by retrying.
      this.log('warn', `graph-gen socket: cannot connect to the base address: ${errorText(error)}`);
      this.setState('down');
      for (const waiter of [...this.waiters]) waiter.finish(false);
      return;
    }
    this.ws = ws;
    let closedResolve: () => void = () => undefined;
    this.closedSocket = new Promise<void>((resolve) => (closedResolve = resolve));
    ws.on('open', () => this.onOpen(ws));
    ws.on('message', (data, isBinary) => {
      this.pacer.pace(ws);
      // A frame's handling must never throw into ws (an uncaught error there takes Node-RED down).
      try {
        this.frames.read(data, isBinary);
      } catch (error) {
        this.drop(`a frame could not be handled: ${errorText(error)}`);
      }
    });
    ws.on('pong', () => (this.awaitingPong = false));
    // The handshake's answer, when it is not the upgrade: its status says whether the key was refused.
    ws.on('unexpected-response', (_request, response) => {
      const status = response.statusCode ?? 0;
      if (status === 401 || status === 403) this.refused = true;
      response.resume();
      this.log('debug', `graph-gen socket: the server answered the upgrade with HTTP ${status}`);
      ws.terminate();
    });
    ws.on('error', (error) => {
      // A certificate not trusted (or a TLS setting that does not fit) fails every try alike: waits for the
      // socket end at once, as for a refused key, and the next try comes after the longest backoff.
      const failure = transportFailure(error, new URL(this.options.baseUrl).host, undefined);
      if (failure?.permanent) this.refusedOnTheWay = failure.sentence;
      if (isNotSent(error)) this.reachedNothing = true;
      this.log('debug', `graph-gen socket error: ${errorText(error)}`);
    });
    ws.on('close', (code) => {
      closedResolve();
      this.onClose(ws, code);
    });
  }

  private onOpen(ws: WebSocket): void {
    if (ws !== this.ws) return;
    this.refused = false;
    this.refusedOnTheWay = undefined;
    this.epochCount += 1;
    this.stats.socketsOpened += 1;
    this.awaitingPong = false;
    ws.send(JSON.stringify({ type: 'feature_flags', data: { supports_preview_metadata: true } }));
    this.pingTimer = setInterval(() => this.heartbeat(ws), this.timings.pingIntervalMs);
    this.pingTimer.unref();
    this.stableTimer = setTimeout(() => (this.attempt = 0), this.timings.stableMs);
    this.stableTimer.unref();
    this.setState('open');
    for (const waiter of [...this.waiters]) waiter.finish(true);
  }

  private heartbeat(ws: WebSocket): void {
    if (this.awaitingPong) {
      this.log('debug', 'graph-gen socket: no pong since the last ping, closing it as dead');
      ws.terminate();
      return;
    }
    this.awaitingPong = true;
    try {
      ws.ping();
    } catch {
      ws.terminate();
    }
  }

  private onClose(ws: WebSocket, code: number): void {
    if (ws !== this.ws) return;
    this.ws = undefined;
    clearInterval(this.pingTimer);
    clearTimeout(this.stableTimer);
    this.pingTimer = this.stableTimer = undefined;
    this.frames.newConnection();
    if (this.closed) return;
    if (this.currentState === 'idle') {
      // Someone subscribed or waited while this idle close was under way (ensureOpen saw the closing socket
      // and did nothing): the old socket is gone now, so open the new one.
      if (this.shouldStayOpen() && !this.reconnectTimer) this.connect();
      return;
    }
    if (!this.shouldStayOpen()) {
      this.setState('idle');
      return;
    }
    const final = this.refused || this.refusedOnTheWay !== undefined;
    const delay = final ? this.timings.backoffMaxMs : this.reopenAtOnce ? 0 : this.backoff();
    this.reopenAtOnce = false;
    this.log(
      final ? 'warn' : 'debug',
      this.refused
        ? `graph-gen socket: the server refused ${this.options.credentialName ?? 'the API key'}, trying again in ${Math.round(delay / 1000)} s`
        : this.refusedOnTheWay !== undefined
          ? `graph-gen socket: ${this.refusedOnTheWay}; trying again in ${Math.round(delay / 1000)} s`
          : `graph-gen socket closed (${code}), reconnecting in ${delay} ms`,
    );
    this.reconnectAt = Date.now() + delay;
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      if (!this.closed && !this.ws && this.shouldStayOpen()) this.connect();
      else if (!this.closed && !this.ws) this.setState('idle');
    }, delay);
    this.reconnectTimer.unref();
    this.setState(this.refused ? 'unauthorized' : 'down');
    for (const waiter of [...this.waiters]) {
      if (final || this.reconnectAt > waiter.deadline) waiter.finish(false);
    }
  }

  /** Full jitter: a random wait below a ceiling that doubles per attempt, capped. */
  private backoff(): number {
    const ceiling = Math.min(this.timings.backoffMaxMs, this.timings.backoffBaseMs * 2 ** this.attempt);
    this.attempt += 1;
    return Math.floor(Math.random() * ceiling);
  }

  private shouldStayOpen(): boolean {
    return this.users.size > 0 || this.subscriptions.size > 0 || this.waiters.size > 0;
  }

  private closeWhenUnused(): void {
    if (this.closed || this.users.size > 0 || this.subscriptions.size > 0 || this.graceTimer) return;
    this.graceTimer = setTimeout(() => {
      this.graceTimer = undefined;
      if (this.users.size > 0 || this.subscriptions.size > 0 || this.closed) return;
      clearTimeout(this.reconnectTimer);
      this.reconnectTimer = undefined;
      this.setState('idle');
      void this.closeSocket();
    }, this.timings.graceMs);
    this.graceTimer.unref();
  }

  private cancelGrace(): void {
    clearTimeout(this.graceTimer);
    this.graceTimer = undefined;
  }

  private async closeSocket(): Promise<void> {
    const ws = this.ws;
    if (!ws) return;
    const closedSocket = this.closedSocket;
    clearInterval(this.pingTimer);
    clearTimeout(this.stableTimer);
    if (ws.readyState === WebSocket.CONNECTING) ws.terminate();
    else ws.close(1000);
    // A server that never answers the close handshake must not hold the redeploy up.
    const force = setTimeout(() => ws.terminate(), 1_000);
    await closedSocket;
    clearTimeout(force);
    if (this.ws === ws) this.ws = undefined;
  }

  private clearTimers(): void {
    clearTimeout(this.reconnectTimer);
    clearInterval(this.pingTimer);
    clearTimeout(this.stableTimer);
    this.reconnectTimer = this.pingTimer = this.stableTimer = undefined;
  }

  private setState(state: ConnectionState): void {
    const previous = this.currentState;
    if (previous === state) return;
    this.currentState = state;
    const reconnected = state === 'open' && this.epochCount > 1;
    for (const user of [...this.users]) this.safely(() => user.onConnectionState?.(state, reconnected));
  }

  /** Whether other awaits already listen to this job (a new one has missed their earlier events). */
  isListened(promptId: string): boolean {
    return this.subscriptions.isListened(promptId);
  }

  /**
   * Whether every event of the job since the socket's connection `epoch` is here: the socket has stayed open on
   * that connection, and no event of it was lost while nobody awaited it (kept-events.ts).
   */
  heardAllSince(promptId: string, epoch: number): boolean {
    return (
      this.currentState === 'open' && this.epochCount === epoch && !this.subscriptions.lostEvents(promptId)
    );
  }

  /** Whether events of this job are kept (a new await is replayed them all). */
  isKept(promptId: string): boolean {
    return this.subscriptions.isKept(promptId);
  }

  private drop(reason: string): void {
    this.stats.framesDropped += 1;
    this.log('debug', `graph-gen socket: dropped a frame: ${reason}`);
  }

  /** Bytes of the events kept for later awaits. */
  get keptBytes(): number {
    return this.subscriptions.keptBytes;
  }

  /** Number of prompt_ids whose events are kept for a later await. */
  get keptJobs(): number {
    return this.subscriptions.keptJobs;
  }

  private safely(call: () => void): void {
    try {
      call();
    } catch (error) {
      this.log('warn', `graph-gen socket: a listener failed: ${errorText(error)}`);
    }
  }

  /** Logs through the logger, or the first user that takes logs; always cleaned of secrets. */
  log(level: LogLevel, message: string): void {
    const clean = cleanForReport(message, this.secrets);
    if (this.options.logger) {
      this.options.logger(level, clean);
      return;
    }
    for (const user of this.users) {
      if (user.onLog) {
        user.onLog(level, clean);
        return;
      }
    }
  }
}

/**
 * The socket's address: the base address's host with ws/wss (from http/https), its path + `/ws`,
 * `clientId`, and `token` only when there is one (the API key; a token for servers that take it so;
 * self-hosted servers without a login get none). Holds the token: never log it.
 */
export function socketAddress(baseUrl: string, clientId: string, token?: string): string {
  const url = new URL(baseUrl.endsWith('/') ? baseUrl : `${baseUrl}/`);
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  url.pathname = `${url.pathname}ws`;
  url.search = '';
  url.hash = '';
  url.searchParams.set('clientId', clientId);
  if (token) url.searchParams.set('token', token);
  return url.toString();
}
