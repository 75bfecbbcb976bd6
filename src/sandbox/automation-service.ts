/**
 * The automation service's stand-in: GET <prefix>/api/v<version>/workflows with cursor paging, behaving as
 * real deployments do (FACTS.md): opaque cursors that hold only the offset (so `active` and `limit` must be
 * sent on every page), default 100 and a silent cap at 250, `nextCursor: null` on the last page, 400
 * `{message}` on a bad cursor, 401 `{"message":"Unauthorized"}` on a missing or wrong key on every page,
 * and `limit=0` answering everything with a cursor that repeats forever. Tests can also make it misbehave
 * (repeat a cursor, never end) and change the list between pages.
 */
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import type { RequestContext, SandboxServer } from './server';

export interface AutomationServiceOptions {
  /** The key expected in the key header; undefined accepts any request. */
  apiKey?: string;
  /** Header that carries the key (default X-AUTOMATION-API-KEY). */
  headerName?: string;
  /** How many workflows to seed (default 0). */
  workflows?: number;
  /** API versions served (default [1]); others answer 404. */
  versions?: number[];
  /** A path prefix the service lives under (a self-hosted instance behind a proxy), e.g. `/n8n`. */
  pathPrefix?: string;
  /** Add `total` (the number of matching workflows) to every page, as some deployments do. */
  reportTotal?: boolean;
}

/** Ways to break the paging on purpose: every page sends the same cursor, or cursors never end. */
export type Misbehaviour = 'repeat-cursor' | 'endless' | undefined;

export interface ListedPage {
  offset: number;
  count: number;
  active?: boolean;
  nextCursor: string | null;
}

export interface AutomationService {
  /** Replaces the stored workflows with `count` generated ones (every third inactive). */
  seed(count: number): void;
  /** Puts `count` new workflows at the front, as a list that changes mid-walk does. */
  prepend(count: number): void;
  /** The stored workflows, in list order. */
  readonly workflows: ReadonlyArray<SandboxWorkflow>;
  misbehave: Misbehaviour;
  reportTotal: boolean;
  /** Distinct TCP connections that carried a list request (keep-alive reuse shows as 1). */
  readonly connectionsSeen: number;
  /** 'listed' (ListedPage) after each page is answered. */
  readonly events: EventEmitter;
  /** Clears misbehaviour and the connection tally (not the workflows). */
  reset(): void;
}

export interface SandboxWorkflow {
  id: string;
  name: string;
  active: boolean;
  createdAt: string;
  updatedAt: string;
  tags: Array<{ id: string; name: string }>;
  nodes: number;
}

export const DEFAULT_KEY_HEADER = 'X-AUTOMATION-API-KEY';
const DEFAULT_LIMIT = 100;
const MAX_LIMIT = 250;
const EPOCH = Date.UTC(2026, 0, 1);

function makeWorkflow(serial: number): SandboxWorkflow {
  const stamp = new Date(EPOCH + serial * 60_000).toISOString();
  return {
    id: `wf${serial.toString(36).padStart(6, '0')}`,
    name: `Workflow ${serial}`,
    active: serial % 3 !== 2,
    createdAt: stamp,
    updatedAt: stamp,
    tags: serial % 5 === 0 ? [{ id: 't1', name: 'nightly' }] : [],
    nodes: 3 + (serial % 7),
  };
}

function escapeForPattern(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

export function mountAutomationService(
  server: SandboxServer,
  options: AutomationServiceOptions,
): AutomationService {
  let workflows: SandboxWorkflow[] = [];
  let serial = 0;
  // A per-instance salt makes cursors opaque and ties them to this service: another's cursor is refused.
  const salt = randomBytes(4).toString('hex');
  const sockets = new WeakSet<Socket>();
  let connectionsSeen = 0;
  const events = new EventEmitter();
  const versions = new Set(options.versions ?? [1]);
  const headerName = (options.headerName ?? DEFAULT_KEY_HEADER).toLowerCase();
  const segments = (options.pathPrefix ?? '').split('/').filter(Boolean);
  const prefix = segments.length ? `/${segments.map(escapeForPattern).join('/')}` : '';

  const service: AutomationService = {
    seed(count) {
      serial = 0;
      workflows = [];
      for (let i = 0; i < count; i++) workflows.push(makeWorkflow(++serial));
    },
    prepend(count) {
      const added: SandboxWorkflow[] = [];
      for (let i = 0; i < count; i++) added.push(makeWorkflow(++serial));
      workflows = [...added, ...workflows];
    },
    get workflows() {
      return workflows;
    },
    misbehave: undefined,
    reportTotal: options.reportTotal ?? false,
    get connectionsSeen() {
      return connectionsSeen;
    },
    events,
    reset() {
      service.misbehave = undefined;
      service.reportTotal = options.reportTotal ?? false;
      connectionsSeen = 0;
    },
  };
  service.seed(options.workflows ?? 0);

  const encodeCursor = (offset: number, round = 0): string =>
    Buffer.from(`${salt}.${offset}.${round}`).toString('base64url');
  const decodeCursor = (cursor: string): { offset: number; round: number } | undefined => {
    const match = /^([0-9a-f]{8})\.(\d+)\.(\d+)$/.exec(Buffer.from(cursor, 'base64url').toString());
    if (!match || match[1] !== salt) return undefined;
    return { offset: Number(match[2]), round: Number(match[3]) };
  };

  const list = (ctx: RequestContext): void => {
    const socket = ctx.req.socket;
    if (!sockets.has(socket)) {
      sockets.add(socket);
      connectionsSeen += 1;
    }
    if (!versions.has(Number(ctx.params[0]))) {
      ctx.json(404, { message: `API version v${ctx.params[0]} is not served here` });
      return;
    }
    if (options.apiKey !== undefined && ctx.req.headers[headerName] !== options.apiKey) {
      ctx.json(401, { message: 'Unauthorized' });
      return;
    }
    const query = ctx.url.searchParams;
    const activeWord = query.get('active');
    if (activeWord !== null && activeWord !== 'true' && activeWord !== 'false') {
      ctx.json(400, { message: 'request/query/active must be boolean' });
      return;
    }
    const limitText = query.get('limit');
    if (limitText !== null && !/^\d+$/.test(limitText)) {
      ctx.json(400, { message: 'request/query/limit must be integer' });
      return;
    }
    const cursorText = query.get('cursor');
    const cursor = cursorText === null ? { offset: 0, round: 0 } : decodeCursor(cursorText);
    if (!cursor) {
      ctx.json(400, { message: 'Parameter "cursor" is not valid' });
      return;
    }
    const active = activeWord === null ? undefined : activeWord === 'true';
    const matching = active === undefined ? workflows : workflows.filter((wf) => wf.active === active);
    // limit=0 answers everything, with a cursor that repeats forever (a real deployment's quirk).
    const requested = limitText === null ? DEFAULT_LIMIT : Number(limitText);
    const limit = requested === 0 ? matching.length : Math.min(requested, MAX_LIMIT);
    let data: SandboxWorkflow[];
    let nextCursor: string | null;
    if (service.misbehave === 'endless') {
      // Cursors that never end and never repeat: the walk must stop by itself.
      const start = matching.length ? cursor.offset % matching.length : 0;
      data = matching.slice(start, start + limit);
      nextCursor = encodeCursor(cursor.offset + limit, cursor.round + 1);
    } else {
      data = matching.slice(cursor.offset, cursor.offset + limit);
      const end = cursor.offset + limit;
      if (requested === 0) nextCursor = encodeCursor(0);
      else if (service.misbehave === 'repeat-cursor') nextCursor = encodeCursor(limit);
      else nextCursor = end < matching.length ? encodeCursor(end) : null;
    }
    const body: Record<string, unknown> = { data, nextCursor };
    if (service.reportTotal) body.total = matching.length;
    ctx.json(200, body);
    events.emit('listed', { offset: cursor.offset, count: data.length, active, nextCursor } as ListedPage);
  };

  server.route('GET', new RegExp(`^${prefix}/api/v(\\d+)/workflows$`), list);
  return service;
}
