/**
 * automation-list-workflows: one page of the workflow list (page mode, loopable on `msg.nextCursor`) or
 * every page (all mode: one msg, or one msg per page with `msg.parts` for a join node). Thin: inputs are
 * checked here, the paging lives in src/automation/client.ts.
 */
import type { Node, NodeAPI, NodeDef, NodeMessage, NodeMessageInFlow, NodeStatus } from 'node-red';
import {
  DEFAULT_LIMIT,
  RepeatFilter,
  checkActive,
  checkCursor,
  checkLimit,
  checkPageCap,
  type AutomationClient,
  type Workflow,
} from '../automation/client';
import { ServiceError, invalidInput } from '../http/errors';
import {
  asServiceError,
  catalogTexts,
  evaluateProperty,
  statusFailed,
  handleMessages,
  statusOk,
  type Texts,
} from './node-helpers';
import { textOf } from '../boundary/outside';
import { migrateConfig } from './config-versions';

/** The settings, each present: migrateConfig (config-versions.ts) gives an older node its old defaults. */
interface ListWorkflowsDef extends NodeDef {
  server: string;
  active: string;
  activeType: string;
  limit: string | number;
  limitType: string;
  mode: 'page' | 'all';
  split: 'none' | 'page';
  maxPages: string | number;
}

type ListMessage = NodeMessageInFlow & {
  active?: unknown;
  limit?: unknown;
  cursor?: unknown;
  nextCursor?: unknown;
  parts?: Record<string, unknown>;
};

/** What this node needs of an automation-config node. */
interface AutomationConfigNode extends Node {
  client?: AutomationClient;
  settingsError?: string;
}

/** TypedInput types whose value is the setting itself rather than a place to read it from. */
const LITERAL_TYPES = new Set(['', 'filter', 'num', 'str', 'bool']);

function counted(texts: Texts, count: number, more = false): NodeStatus {
  const key =
    count === 1 ? (more ? 'status.one-more' : 'status.one') : more ? 'status.many-more' : 'status.many';
  return statusOk(texts(key, { count }));
}

export = function (RED: NodeAPI) {
  const texts = catalogTexts(RED, 'automation-list-workflows');

  function AutomationListWorkflows(this: Node, saved: NodeDef) {
    RED.nodes.createNode(this, saved);
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- handlers below need the node
    const node = this;
    const def = migrateConfig<ListWorkflowsDef>('automation-list-workflows', saved, (newer) =>
      node.warn(texts('warnings.newer-settings', newer)),
    );
    const mode = def.mode === 'all' ? 'all' : 'page';
    const splitPages = mode === 'all' && def.split === 'page';
    if (!RED.nodes.getNode(def.server)) node.status(statusFailed(texts('status.no-config')));

    async function setting(msg: NodeMessage, value: unknown, type: string | undefined): Promise<unknown> {
      if (LITERAL_TYPES.has(type ?? '')) return value === '' ? undefined : value;
      return evaluateProperty(RED, node, msg, textOf(value) ?? '', type);
    }

    function clientFor(): AutomationClient {
      const config = RED.nodes.getNode(def.server) as AutomationConfigNode | null;
      if (!config) throw invalidInput(texts('errors.no-config'));
      if (!config.client) throw invalidInput(config.settingsError ?? texts('errors.no-address'));
      return config.client;
    }

    async function handle(
      msg: ListMessage,
      send: (msg: NodeMessage | NodeMessage[]) => void,
      signal: AbortSignal,
    ): Promise<void> {
      // Every input is checked before the first request, so a bad one costs nothing.
      const active = checkActive(
        msg.active !== undefined ? msg.active : await setting(msg, def.active, def.activeType),
      );
      const limitValue = msg.limit !== undefined ? msg.limit : await setting(msg, def.limit, def.limitType);
      const limit = checkLimit(limitValue === undefined || limitValue === '' ? DEFAULT_LIMIT : limitValue);
      const payloadCursor =
        msg.payload && typeof msg.payload === 'object' && !Array.isArray(msg.payload)
          ? (msg.payload as { nextCursor?: unknown }).nextCursor
          : undefined;
      const cursor = checkCursor(msg.cursor ?? msg.nextCursor ?? payloadCursor);
      const maxPages = checkPageCap(def.maxPages);
      const client = clientFor();
      // Once the cursor is consumed the output can be wired straight back in to fetch the following page;
      // a msg that fails keeps it, so a Catch node sees which page failed.
      const consumeCursor = (out: ListMessage): void => {
        delete out.cursor;
        delete out.nextCursor;
      };

      if (mode === 'page') {
        node.status(statusOk(texts('status.page')));
        const page = await client.listPage({ active, limit, cursor }, signal);
        consumeCursor(msg);
        msg.payload = page.data;
        if (page.nextCursor !== undefined) msg.nextCursor = page.nextCursor;
        node.status(counted(texts, page.data.length, page.nextCursor !== undefined));
        send(msg);
        return;
      }

      const filter = new RepeatFilter();
      const workflows: Workflow[] = [];
      const partsId = RED.util.generateId();
      let listed = 0;
      let pagesSent = 0;
      /** A copy of the msg for one page of a split list, without copying the input's payload for nothing. */
      const pageMessage = (index: number, payload: Workflow[], last: boolean): ListMessage => {
        const out = RED.util.cloneMessage({ ...msg, payload: undefined }) as ListMessage;
        consumeCursor(out);
        out.payload = payload;
        out.parts = {
          id: partsId,
          type: 'array',
          index,
          // A join node concatenates array parts only when len > 1; a page is a slice of one list.
          len: Math.max(limit, 2),
          ...(last ? { count: index + 1 } : {}),
          ...(msg.parts ? { parts: msg.parts } : {}),
        };
        return out;
      };
      node.status(statusOk(texts('status.page-number', { number: 1 })));
      try {
        for await (const page of client.walk({ active, limit }, { cursor, maxPages, signal })) {
          const fresh = filter.fresh(page.data);
          if (splitPages) {
            send(pageMessage(page.number - 1, fresh, page.nextCursor === undefined));
            pagesSent++;
          } else {
            for (const workflow of fresh) workflows.push(workflow);
          }
          listed += fresh.length;
          if (page.nextCursor !== undefined) {
            node.status(statusOk(texts('status.page-number', { number: page.number + 1 })));
          }
        }
      } catch (error) {
        if (pagesSent === 0 || signal.aborted) throw error;
        // Pages already went out: a join node would hold them for a list that never completes. A msg with
        // msg.reset and the group's msg.parts makes it drop them, so no partial list passes for a whole one.
        const closing = pageMessage(pagesSent, [], false) as ListMessage & { reset?: boolean };
        closing.reset = true;
        send(closing);
        const failure = asServiceError(error);
        throw new ServiceError(
          failure.code,
          texts('errors.pages-sent', { message: failure.message, count: pagesSent, id: partsId }),
          failure.cause,
        );
      }
      node.status(counted(texts, listed));
      if (!splitPages) {
        consumeCursor(msg);
        msg.payload = workflows;
        send(msg);
      }
    }

    handleMessages<ListMessage>(node, handle);
  }

  RED.nodes.registerType('automation-list-workflows', AutomationListWorkflows);
};
