/**
 * The sandbox's HTTP and WebSocket core: a tiny router, fault injection and counters. The services
 * (automation, generation, storage) mount their routes on it. Listens on 127.0.0.1 only.
 */
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { WebSocketServer, type WebSocket } from 'ws';

export interface Fault {
  /** Only requests of this method (any when absent). */
  method?: string;
  /** The path (without query) the fault applies to: exact string or pattern. */
  path: string | RegExp;
  /** Answer with this status instead of the route. */
  status?: number;
  /** Body of that answer (JSON when not a string). */
  body?: unknown;
  /** Retry-After header of that answer, in seconds. */
  retryAfter?: number | string;
  /** Wait this long before handling (or before the injected answer). */
  delayMs?: number;
  /** Destroy the connection without an answer. */
  drop?: boolean;
  /** Let the route answer, but replace its body with one that is not JSON. */
  malformed?: boolean;
  /** Let the route answer at once, but hold the answer back this long (an answer that arrives stale). */
  holdMs?: number;
  /** Let the route answer, but cut the connection once this many body bytes are sent (a broken transfer). */
  breakAfterBytes?: number;
  /** Let the route answer, but send nothing more once this many body bytes are sent (a stalled transfer). */
  stallAfterBytes?: number;
  /** How many requests the fault applies to (default 1; Infinity for all). */
  times?: number;
}

export class FaultInjector {
  private faults: Array<Fault & { remaining: number }> = [];

  add(fault: Fault): void {
    this.faults.push({ ...fault, remaining: fault.times ?? 1 });
  }

  clear(): void {
    this.faults = [];
  }

  /** The first fault that applies to this request; spends one of its uses. */
  take(method: string, path: string): Fault | undefined {
    const index = this.faults.findIndex(
      (fault) =>
        (!fault.method || fault.method.toUpperCase() === method) &&
        (typeof fault.path === 'string' ? fault.path === path : fault.path.test(path)),
    );
    if (index < 0) return undefined;
    const fault = this.faults[index];
    fault.remaining -= 1;
    if (fault.remaining <= 0) this.faults.splice(index, 1);
    return fault;
  }
}

export interface SeenRequest {
  method: string;
  path: string;
  query: URLSearchParams;
  headers: http.IncomingHttpHeaders;
}

export class Counters {
  /** Requests seen, newest last; only the latest `keep` are kept, so a long `npm start` stays small. */
  requests: SeenRequest[] = [];
  keep = 50_000;
  socketsOpened = 0;
  socketsOpen = 0;
  /** Upgrade requests seen on the WebSocket path, refused ones included. */
  handshakes: SeenRequest[] = [];

  /** Requests of a path (exact or pattern), optionally of one method. */
  count(path: string | RegExp, method?: string): number {
    return this.matching(path, method).length;
  }

  matching(path: string | RegExp, method?: string): SeenRequest[] {
    return this.requests.filter(
      (seen) =>
        (!method || seen.method === method.toUpperCase()) &&
        (typeof path === 'string' ? seen.path === path : path.test(seen.path)),
    );
  }

  record(seen: SeenRequest): void {
    this.requests.push(seen);
    if (this.requests.length > this.keep * 1.1) this.requests.splice(0, this.requests.length - this.keep);
  }

  reset(): void {
    this.requests = [];
    this.handshakes = [];
    this.socketsOpened = 0;
  }
}

export interface RequestContext {
  req: http.IncomingMessage;
  res: http.ServerResponse;
  url: URL;
  /** The route pattern's capture groups. */
  params: string[];
  /** The whole request body (the sandbox is a test server; the client under test streams). */
  body(): Promise<Buffer>;
  json(status: number, body: unknown, headers?: http.OutgoingHttpHeaders): void;
  text(status: number, body: string, headers?: http.OutgoingHttpHeaders): void;
}

export type RouteHandler = (context: RequestContext) => void | Promise<void>;
export type UpgradeHandler = (socket: WebSocket, req: http.IncomingMessage, url: URL) => void;
/** Decides an upgrade before it is accepted: a status refuses it. */
export type UpgradeGate = (req: http.IncomingMessage, url: URL) => number | undefined;

export interface SandboxLogin {
  /** The header's name, lower case. */
  header: string;
  value: string;
  socketToken?: string;
}

interface Route {
  method: string;
  pattern: RegExp;
  handler: RouteHandler;
}

const MALFORMED_BODY = '{"this is": not json';

export class SandboxServer {
  readonly faults = new FaultInjector();
  readonly counters = new Counters();
  private readonly routes: Route[] = [];
  private readonly upgrades = new Map<string, { handler: UpgradeHandler; gate?: UpgradeGate }>();
  private readonly http = http.createServer((req, res) => void this.handle(req, res));
  private readonly wss = new WebSocketServer({ noServer: true });
  private readonly connections = new Set<Socket>();
  private address?: AddressInfo;
  /**
   * Answer an unknown route as aiohttp does (self-hosted servers): `text/plain` `404: Not Found`, instead of
   * the JSON `{code, message}` of cloud gateways.
   */
  plainNotFound = false;
  /**
   * A login in front of the whole server, as a reverse proxy puts one (basic auth, a bearer check): a request or
   * a handshake without `header: value` is answered 401 before anything else; a handshake may carry
   * `?token=<socketToken>` instead (ComfyUI-Login's socket).
   */
  login?: SandboxLogin;

  constructor() {
    this.http.on('connection', (socket) => {
      this.connections.add(socket);
      socket.once('close', () => this.connections.delete(socket));
    });
    this.http.on('upgrade', (req, socket, head) => this.upgrade(req, socket as Socket, head));
  }

  route(method: string, pattern: RegExp, handler: RouteHandler): void {
    this.routes.push({ method: method.toUpperCase(), pattern, handler });
  }

  onUpgrade(path: string, handler: UpgradeHandler, gate?: UpgradeGate): void {
    this.upgrades.set(path, { handler, gate });
  }

  /** TCP connections open now (HTTP keep-alive ones and upgraded sockets alike). */
  get openConnections(): number {
    return this.connections.size;
  }

  /** All WebSocket clients connected now. */
  get sockets(): Set<WebSocket> {
    return this.wss.clients;
  }

  get url(): string {
    if (!this.address) throw new Error('the sandbox is not listening');
    return `http://127.0.0.1:${this.address.port}`;
  }

  get port(): number {
    if (!this.address) throw new Error('the sandbox is not listening');
    return this.address.port;
  }

  async listen(port = 0): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.http.once('error', reject);
      this.http.listen(port, '127.0.0.1', () => {
        this.http.off('error', reject);
        resolve();
      });
    });
    this.address = this.http.address() as AddressInfo;
  }

  async close(): Promise<void> {
    for (const client of this.wss.clients) client.terminate();
    for (const socket of this.connections) socket.destroy();
    await new Promise<void>((resolve) => this.wss.close(() => resolve()));
    await new Promise<void>((resolve) => this.http.close(() => resolve()));
  }

  private seen(req: http.IncomingMessage, url: URL): SeenRequest {
    return { method: req.method ?? 'GET', path: url.pathname, query: url.searchParams, headers: req.headers };
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://127.0.0.1');
    const method = req.method ?? 'GET';
    this.counters.record(this.seen(req, url));
    if (this.login && req.headers[this.login.header] !== this.login.value) {
      res.writeHead(401, { 'content-type': 'text/plain', 'www-authenticate': 'Basic realm="sandbox"' });
      res.end('401 Authorization Required');
      return;
    }
    try {
      const fault = this.faults.take(method, url.pathname);
      if (fault?.delayMs) await new Promise((resolve) => setTimeout(resolve, fault.delayMs));
      if (fault?.drop) {
        req.socket.destroy();
        return;
      }
      if (fault?.status !== undefined) {
        const headers: http.OutgoingHttpHeaders = {};
        if (fault.retryAfter !== undefined) headers['retry-after'] = String(fault.retryAfter);
        if (typeof fault.body === 'string')
          context(req, res, url, []).text(fault.status, fault.body, headers);
        else
          context(req, res, url, []).json(fault.status, fault.body ?? { message: 'injected fault' }, headers);
        return;
      }
      const route = this.routes.find(
        (candidate) => candidate.method === method && candidate.pattern.test(url.pathname),
      );
      if (!route) {
        this.notFound(context(req, res, url, []));
        return;
      }
      const holdMs = fault?.holdMs;
      if (holdMs) {
        const end = res.end.bind(res) as (...args: unknown[]) => void;
        res.end = ((...args: unknown[]) => {
          setTimeout(() => end(...args), holdMs);
          return res;
        }) as typeof res.end;
      }
      if (fault?.breakAfterBytes !== undefined) limitBody(res, fault.breakAfterBytes, 'break');
      if (fault?.stallAfterBytes !== undefined) limitBody(res, fault.stallAfterBytes, 'stall');
      const params = (route.pattern.exec(url.pathname) ?? []).slice(1);
      const ctx = context(req, res, url, params);
      if (fault?.malformed) {
        ctx.json = (status, _body, headers) =>
          ctx.text(status, MALFORMED_BODY, { 'content-type': 'application/json', ...headers });
      }
      await route.handler(ctx);
    } catch (error) {
      if (!res.headersSent)
        context(req, res, url, []).json(500, { message: `sandbox error: ${String(error)}` });
      else res.destroy();
    }
  }

  /** The answer for a route this server does not have. */
  notFound(ctx: RequestContext): void {
    if (this.plainNotFound) {
      ctx.text(404, '404: Not Found', { 'content-type': 'text/plain; charset=utf-8' });
      return;
    }
    ctx.json(404, { code: 'not_found', message: `no route for ${ctx.req.method} ${ctx.url.pathname}` });
  }

  private upgrade(req: http.IncomingMessage, socket: Socket, head: Buffer): void {
    const url = new URL(req.url ?? '/', 'http://127.0.0.1');
    this.counters.handshakes.push(this.seen(req, url));
    const entry = this.upgrades.get(url.pathname);
    const loggedIn =
      !this.login ||
      req.headers[this.login.header] === this.login.value ||
      (this.login.socketToken !== undefined && url.searchParams.get('token') === this.login.socketToken);
    const refusal = !loggedIn ? 401 : entry ? entry.gate?.(req, url) : 404;
    const fault = this.faults.take('UPGRADE', url.pathname);
    const status = fault?.status ?? refusal;
    if (!entry || status !== undefined || fault?.drop) {
      if (!fault?.drop)
        socket.write(`HTTP/1.1 ${status ?? 404} Refused\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
      socket.destroy();
      return;
    }
    this.wss.handleUpgrade(req, socket, head, (ws) => {
      this.counters.socketsOpened += 1;
      this.counters.socketsOpen += 1;
      ws.once('close', () => (this.counters.socketsOpen -= 1));
      entry.handler(ws, req, url);
    });
  }
}

/** Sends at most `limit` body bytes of the answer, then destroys the connection or sends nothing more. */
function limitBody(res: http.ServerResponse, limit: number, then: 'break' | 'stall'): void {
  let sent = 0;
  const write = res.write.bind(res) as (chunk: Buffer) => boolean;
  const cut = (chunk: unknown): boolean => {
    if (chunk === undefined || typeof chunk === 'function') return true;
    const bytes = Buffer.isBuffer(chunk) ? chunk : Buffer.from(String(chunk));
    const room = limit - sent;
    if (bytes.length < room) {
      sent += bytes.length;
      write(bytes);
      return true;
    }
    if (room > 0) write(bytes.subarray(0, room));
    sent = limit;
    if (then === 'break') setImmediate(() => res.socket?.destroy());
    return false;
  };
  res.write = ((chunk: unknown) => cut(chunk)) as typeof res.write;
  res.end = ((chunk?: unknown) => {
    if (cut(chunk) && sent < limit && then === 'break') res.socket?.destroy();
    return res;
  }) as typeof res.end;
}

function context(
  req: http.IncomingMessage,
  res: http.ServerResponse,
  url: URL,
  params: string[],
): RequestContext {
  return {
    req,
    res,
    url,
    params,
    body: async () => {
      const chunks: Buffer[] = [];
      for await (const chunk of req) chunks.push(chunk as Buffer);
      return Buffer.concat(chunks);
    },
    json(status, body, headers = {}) {
      const text = JSON.stringify(body);
      res.writeHead(status, {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(text),
        ...headers,
      });
      res.end(text);
    },
    text(status, body, headers = {}) {
      res.writeHead(status, {
        'content-type': 'text/plain',
        'content-length': Buffer.byteLength(body),
        ...headers,
      });
      res.end(body);
    },
  };
}
