/**
 * graph-gen-queue: lists the queue (with the running and pending prompt ids), cancels jobs by id (taken out
 * of the queue, or interrupted when running), or interrupts the running job. Thin: the calls live in
 * src/generation/connection.ts and rest-client.ts.
 */
import type { Node, NodeAPI, NodeDef, NodeMessageInFlow } from 'node-red';
import { invalidInput } from '../http/errors';
import { shownValue } from '../boundary/json-values';
import { promptIdsOf } from '../generation/transfer/rest-client';
import { catalogTexts, handleMessages, statusOk, type Texts } from './node-helpers';
import { generationTarget, showTargetTrouble } from './generation-target';
import { migrateConfig } from './config-versions';

type QueueAction = 'list' | 'cancel' | 'interrupt';
const ACTIONS: QueueAction[] = ['list', 'cancel', 'interrupt'];

/** The settings, each present: migrateConfig (config-versions.ts) gives an older node its old defaults. */
interface QueueDef extends NodeDef {
  server: string;
  /** A graph-gen-pool node: every server of the pool (then `server` is not used). */
  pool: string;
  action: QueueAction;
}

type QueueMessage = NodeMessageInFlow & {
  action?: unknown;
  prompt_id?: unknown;
  /** Through a pool: the server the jobs to cancel or interrupt are on ({id, name}). */
  server?: unknown;
  running?: string[];
  pending?: string[];
  removed?: string[];
  interrupted?: string[];
  not_queued?: string[];
  unconfirmed?: string[];
};

/** The prompt ids to cancel: msg.prompt_id (a string or an array), else msg.payload (the same). */
function idsToCancel(msg: QueueMessage, texts: Texts): string[] {
  const source = msg.prompt_id !== undefined ? msg.prompt_id : msg.payload;
  const list = Array.isArray(source) ? source : [source];
  const ids = list
    .map((item) => (item && typeof item === 'object' ? (item as { prompt_id?: unknown }).prompt_id : item))
    .filter((item) => item !== undefined && item !== null && item !== '');
  if (ids.length === 0) throw invalidInput(texts('errors.no-ids'));
  const bad = ids.find((id) => typeof id !== 'string');
  if (bad !== undefined) throw invalidInput(texts('errors.id-not-text', { id: shownValue(bad) }));
  return ids as string[];
}

export = function (RED: NodeAPI) {
  const texts = catalogTexts(RED, 'graph-gen-queue');

  function GraphGenQueue(this: Node, saved: NodeDef) {
    RED.nodes.createNode(this, saved);
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- handlers below need the node
    const node = this;
    const def = migrateConfig<QueueDef>('graph-gen-queue', saved, (newer) =>
      node.warn(texts('warnings.newer-settings', newer)),
    );
    const status = showTargetTrouble(RED, node, def, texts);

    async function handle(msg: QueueMessage, signal: AbortSignal): Promise<void> {
      // Through a pool: every server's queue; a cancel or interrupt goes to each job's server.
      const { pool, connection } = generationTarget(RED, def, texts);
      const action = msg.action !== undefined && msg.action !== '' ? msg.action : def.action;
      if (!ACTIONS.includes(action as QueueAction)) {
        throw invalidInput(texts('errors.bad-action', { action: shownValue(action) }));
      }
      if (action === 'list') {
        const queue = pool ? await pool.queueState(signal) : await connection.dialect.queueState(signal);
        msg.payload = queue;
        msg.running = promptIdsOf(queue.queue_running);
        msg.pending = promptIdsOf(queue.queue_pending);
        status(statusOk(texts('status.listed', { running: msg.running.length, queued: msg.pending.length })));
      } else if (action === 'cancel') {
        const ids = idsToCancel(msg, texts);
        const outcome = pool
          ? await pool.cancel(ids, msg.server, signal)
          : await connection.cancel(ids, signal);
        msg.payload = outcome.body;
        msg.removed = outcome.removed;
        msg.interrupted = outcome.interrupted;
        msg.not_queued = outcome.notQueued;
        msg.unconfirmed = outcome.unconfirmed;
        const count = outcome.removed.length + outcome.interrupted.length;
        status(statusOk(texts('status.cancelled', { count })));
      } else {
        const target = msg.prompt_id;
        if (target !== undefined && target !== '' && typeof target !== 'string') {
          throw invalidInput(texts('errors.interrupt-id-not-text'));
        }
        msg.payload = pool
          ? await pool.interrupt(target || undefined, msg.server, signal)
          : await connection.interrupt(target || undefined, signal);
        status(statusOk(texts('status.interrupted')));
      }
    }

    handleMessages<QueueMessage>(
      node,
      async (msg, send, signal) => {
        await handle(msg, signal);
        send(msg);
      },
      status,
    );
  }

  RED.nodes.registerType('graph-gen-queue', GraphGenQueue);
};
