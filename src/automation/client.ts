/**
 * The automation service's workflow list: one page, or a walk over every page that follows `nextCursor`
 * with the same `active` and `limit` on every request (the service does not keep them in the cursor) and
 * that cannot loop forever. No Node-RED inside; an automation-config node holds one client (one keep-alive
 * pool) and closes it on redeploy.
 */
import { createHash } from 'node:crypto';
import { HttpClient } from '../http/client';
import { ServiceError, invalidInput } from '../http/errors';
import type { RetryPolicy } from '../http/retry';
import { shownValue } from '../boundary/json-values';
import { automationBaseUrl, type AddressSettings } from './address';

export const DEFAULT_KEY_HEADER = 'X-AUTOMATION-API-KEY';
export const DEFAULT_LIMIT = 100;
export const MAX_LIMIT = 250;
export const DEFAULT_PAGE_CAP = 10_000;
/**
 * The highest page cap: 25 million workflows at 250 a page. A walk remembers a digest of every cursor it was
 * sent (to stop a service that repeats one), so the cap bounds that memory too.
 */
export const MAX_PAGE_CAP = 100_000;
const SERVICE_NAME = 'the automation service';

export interface AutomationSettings extends AddressSettings {
  apiKey?: string;
  /** The header that carries the key (deployments behind a gateway may use another). */
  headerName?: string;
  retry?: RetryPolicy;
  timeoutMs?: number;
  /** The largest page read (default 64 MiB). */
  maxPageBytes?: number;
  /** How long one page request may take, body included (default 120 s). */
  totalTimeoutMs?: number;
}

/** A workflow as the service sends it; only `id` is looked at (to drop repeats). */
export type Workflow = Record<string, unknown> & { id?: unknown };

/** `undefined` sends no `active`: every workflow. */
export interface ListQuery {
  active?: boolean;
  limit?: number;
}

export interface WorkflowPage {
  data: Workflow[];
  /** The cursor of the following page; undefined on the last page. */
  nextCursor?: string;
  /** The number of matching workflows, when the service says (not every deployment does). */
  total?: number;
}

export interface WalkOptions {
  /** Start from this cursor instead of the first page. */
  cursor?: string;
  /** Pages at most before the walk is stopped with an error (default 10,000). */
  maxPages?: number;
  signal?: AbortSignal;
}

export interface WalkedPage extends WorkflowPage {
  /** 1 for the first page fetched. */
  number: number;
}

/** Refuses a limit the service would not take as asked (it silently caps, which would mislead). */
export function checkLimit(limit: unknown): number {
  const value = typeof limit === 'string' && limit.trim() !== '' ? Number(limit) : limit;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > MAX_LIMIT) {
    throw invalidInput(
      `the limit ${shownValue(limit)} is not a whole number from 1 to ${MAX_LIMIT}: set the node's limit or msg.limit to one`,
    );
  }
  return value;
}

/** `true`/`false` (booleans or those words) filter; `any` (or nothing) lists every workflow. */
export function checkActive(active: unknown): boolean | undefined {
  if (active === undefined || active === null || active === '') return undefined;
  if (typeof active === 'boolean') return active;
  if (typeof active === 'string') {
    const word = active.trim().toLowerCase();
    if (word === 'true') return true;
    if (word === 'false') return false;
    if (word === 'any') return undefined;
  }
  throw invalidInput(
    `active ${shownValue(active)} is not true, false or any: set the node's active or msg.active to one of them`,
  );
}

/** A cursor must be a string; null, undefined and "" mean the first page. */
export function checkCursor(cursor: unknown): string | undefined {
  if (cursor === undefined || cursor === null || cursor === '') return undefined;
  if (typeof cursor !== 'string') {
    throw invalidInput(
      `the cursor is a ${Array.isArray(cursor) ? 'array' : typeof cursor}, not a string: pass the nextCursor the node sent, as it was`,
    );
  }
  return cursor;
}

/** The page cap of an all-mode walk: a whole number from 1 to MAX_PAGE_CAP; unset (or blank) is the default. */
export function checkPageCap(maxPages: unknown): number {
  if (maxPages === undefined || (typeof maxPages === 'string' && maxPages.trim() === ''))
    return DEFAULT_PAGE_CAP;
  const value = typeof maxPages === 'string' ? Number(maxPages) : maxPages;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > MAX_PAGE_CAP) {
    throw invalidInput(
      `the page cap ${shownValue(maxPages)} is not a whole number from 1 to ${MAX_PAGE_CAP.toLocaleString('en-US')}: set the node's page cap to one (a longer list is better read page by page)`,
    );
  }
  return value;
}

/** A cursor as the walk remembers it: a digest of 16 bytes, not the cursor (which may be 4 KiB). */
function cursorDigest(cursor: string): string {
  return createHash('sha256').update(cursor).digest('base64').slice(0, 22);
}

/** The response body as a page, or an error that says the address is probably wrong. */
/** Cursors are short opaque tokens; a longer one is a broken service (and each page would carry it). */
const MAX_CURSOR_LENGTH = 4096;
/** Pages of up to 250 workflows, each with its nodes: larger than most JSON answers. */
export const MAX_PAGE_BYTES = 64 * 1024 * 1024;

function readPage(body: unknown): WorkflowPage {
  const record = body as { data?: unknown; nextCursor?: unknown; total?: unknown; count?: unknown } | null;
  if (!record || typeof record !== 'object' || !Array.isArray(record.data)) {
    throw new ServiceError(
      'server_error',
      `${SERVICE_NAME} answered the workflow list without a data array: check the address and API version in the config node`,
    );
  }
  const next = record.nextCursor;
  // End of list: nextCursor absent, null or empty.
  const nextCursor = typeof next === 'string' && next !== '' ? next : undefined;
  if (next !== undefined && next !== null && typeof next !== 'string') {
    throw new ServiceError('server_error', `${SERVICE_NAME} sent a nextCursor that is not a string`);
  }
  if (nextCursor !== undefined && nextCursor.length > MAX_CURSOR_LENGTH) {
    throw new ServiceError(
      'server_error',
      `${SERVICE_NAME} sent a nextCursor of ${nextCursor.length} characters, more than the ${MAX_CURSOR_LENGTH} a cursor needs: the list was stopped`,
    );
  }
  const total = [record.total, record.count].find(
    (value): value is number => typeof value === 'number' && Number.isInteger(value) && value >= 0,
  );
  return { data: record.data as Workflow[], nextCursor, total };
}

export class AutomationClient {
  readonly baseUrl: string;
  readonly http: HttpClient;

  constructor(settings: AutomationSettings) {
    this.baseUrl = automationBaseUrl(settings);
    const headers: Record<string, string> = { accept: 'application/json' };
    const headerName = (settings.headerName ?? '').trim() || DEFAULT_KEY_HEADER;
    if (settings.apiKey) headers[headerName.toLowerCase()] = settings.apiKey;
    this.http = new HttpClient({
      baseUrl: this.baseUrl,
      headers,
      secrets: [settings.apiKey],
      serviceName: SERVICE_NAME,
      retry: settings.retry,
      timeoutMs: settings.timeoutMs,
      maxJsonBytes: settings.maxPageBytes ?? MAX_PAGE_BYTES,
      totalTimeoutMs: settings.totalTimeoutMs,
    });
  }

  /** One page. `cursor` picks it; `active` and `limit` must be the walk's own on every page. */
  async listPage(query: ListQuery & { cursor?: string }, signal?: AbortSignal): Promise<WorkflowPage> {
    const limit = query.limit === undefined ? undefined : checkLimit(query.limit);
    const active = checkActive(query.active);
    const cursor = checkCursor(query.cursor);
    try {
      const { body } = await this.http.json<unknown>('workflows', {
        query: { active, limit, cursor },
        action: 'listing workflows',
        signal,
      });
      return readPage(body);
    } catch (error) {
      if (error instanceof ServiceError && error.cause.status === 400 && cursor !== undefined) {
        throw new ServiceError(
          'invalid_request',
          this.http.cleanForReport(
            'the cursor is not valid for this service: pass a nextCursor this service sent for the same list, or none for the first page',
          ),
          error.cause,
        );
      }
      throw error;
    }
  }

  /**
   * Every page in order, as it arrives. Stops with an error instead of looping when a cursor repeats,
   * when the walk needs more pages than the service's total allows, or at the page cap.
   */
  async *walk(query: ListQuery, options: WalkOptions = {}): AsyncGenerator<WalkedPage> {
    const limit = checkLimit(query.limit ?? DEFAULT_LIMIT);
    const active = checkActive(query.active);
    const maxPages = checkPageCap(options.maxPages);
    let cursor = checkCursor(options.cursor);
    const seenCursors = new Set<string>();
    if (cursor !== undefined) seenCursors.add(cursorDigest(cursor));
    for (let number = 1; ; number++) {
      const page = await this.listPage({ active, limit, cursor }, options.signal);
      yield { ...page, number };
      if (page.nextCursor === undefined) return;
      const digest = cursorDigest(page.nextCursor);
      if (seenCursors.has(digest)) {
        throw new ServiceError(
          'server_error',
          `${SERVICE_NAME} sent a nextCursor it had already sent (after page ${number}): the list would never end, so it was stopped`,
        );
      }
      if (page.total !== undefined && number + 1 > Math.ceil(page.total / limit) + 1) {
        throw new ServiceError(
          'server_error',
          `${SERVICE_NAME} still had more pages after page ${number}, more than its ${page.total} workflows need at ${limit} a page: the list was stopped`,
        );
      }
      if (number >= maxPages) {
        throw new ServiceError(
          'invalid_input',
          `the list still had more pages after ${maxPages} (the node's page cap): raise the cap or narrow the list`,
        );
      }
      seenCursors.add(digest);
      cursor = page.nextCursor;
    }
  }

  async close(): Promise<void> {
    await this.http.close();
  }
}

/**
 * Keeps each workflow `id` once across pages (an offset-paged list that changes mid-walk repeats one at
 * a page boundary). Workflows without an id are all kept.
 */
export class RepeatFilter {
  private readonly seen = new Set<unknown>();

  /** The page's workflows not seen before, in order (the same array when nothing was dropped). */
  fresh(data: Workflow[]): Workflow[] {
    let kept: Workflow[] | undefined;
    for (let index = 0; index < data.length; index++) {
      const workflow = data[index];
      const id = workflow && typeof workflow === 'object' ? workflow.id : undefined;
      let repeat = false;
      if (id !== undefined && id !== null) {
        // One hash operation per workflow: the set grows unless the id was already in it.
        const size = this.seen.size;
        repeat = this.seen.add(id).size === size;
      }
      if (repeat && kept === undefined) kept = data.slice(0, index);
      else if (!repeat && kept !== undefined) kept.push(workflow);
    }
    return kept ?? data;
  }
}

/** Every workflow of every page, each id once; the result grows by appending, never by re-copying. */
export async function collectAll(
  pages: AsyncIterable<WalkedPage>,
  onPage?: (page: WalkedPage) => void,
): Promise<{ workflows: Workflow[]; pages: number }> {
  const filter = new RepeatFilter();
  const workflows: Workflow[] = [];
  let count = 0;
  for await (const page of pages) {
    count = page.number;
    onPage?.(page);
    for (const workflow of filter.fresh(page.data)) workflows.push(workflow);
  }
  return { workflows, pages: count };
}
