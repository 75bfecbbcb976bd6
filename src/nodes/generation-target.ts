/**
 * Where a generation flow node sends its requests: the one server of its `server` config node, or a pool (its
 * `pool` setting, a graph-gen-pool node: then `server` is not used). Nodes ask here for the connection to use
 * before a job has a server (its best member now) and for a job's own connection (the member msg.server names,
 * else the one the pool sent the job to), so none of them needs to know whether a pool is behind it.
 */
import type { Node, NodeAPI, NodeStatus } from 'node-red';
import { invalidInput } from '../http/errors';
import type { GenerationConnection } from '../generation/connection';
import type { ServerPool, ServerRef } from '../generation/pool/server-pool';
import {
  catalogTexts,
  generationConnection,
  showSocketTrouble,
  statusFailed,
  statusWaiting,
  type StatusFunction,
  type Texts,
} from './node-helpers';
import type graphGenPool from './graph-gen-pool';

/** A flow node's settings that name its server or pool. */
export interface TargetSettings {
  server?: string;
  pool?: string;
}

export type GenerationTarget =
  { pool: ServerPool; connection?: undefined } | { pool?: undefined; connection: GenerationConnection };

/** The pool a node's settings name, or undefined when they name none. */
function poolNodeOf(RED: NodeAPI, def: TargetSettings): graphGenPool.GraphGenPoolNode | null | undefined {
  if (!def.pool) return undefined;
  return RED.nodes.getNode(def.pool) as graphGenPool.GraphGenPoolNode | null;
}

/** The node's server or pool, or a refusal that says what to set. */
export function generationTarget(RED: NodeAPI, def: TargetSettings, texts: Texts): GenerationTarget {
  const poolNode = poolNodeOf(RED, def);
  if (poolNode === undefined) return { connection: generationConnection(RED, def.server ?? '', texts) };
  const pool = poolNode?.pool();
  if (!pool)
    throw invalidInput(poolNode?.settingsError ?? catalogTexts(RED, 'graph-gen-pool')('errors.no-pool'));
  return { pool };
}

/**
 * The connection a job's later requests go to, and the server to name in msg.server (through a pool: once the
 * pool's memory of where jobs went is read, after a start).
 */
export async function jobConnection(
  target: GenerationTarget,
  promptId: string,
  server: unknown,
): Promise<{ connection: GenerationConnection; server?: ServerRef }> {
  if (!target.pool) return { connection: target.connection };
  const member = await target.pool.jobMember(promptId, server);
  return { connection: member.connection, server: target.pool.refOf(member) };
}

/**
 * A node's status, with its server's trouble shown while it lasts: the shared socket's ("reconnecting") for one
 * server, how many servers are up for a pool ("2 of 3 servers" while some are down). The node sets its own
 * statuses through the returned function.
 */
export function showTargetTrouble(
  RED: NodeAPI,
  node: Node,
  def: TargetSettings,
  texts: Texts,
): StatusFunction {
  const poolNode = poolNodeOf(RED, def);
  if (poolNode === undefined) return showSocketTrouble(RED, node, def.server ?? '', texts);
  const pool = poolNode?.pool();
  if (!pool) return (status) => node.status(status);
  const poolTexts = catalogTexts(RED, 'graph-gen-pool');
  let own: NodeStatus = {};
  let trouble: NodeStatus | undefined;
  const show = (): void => {
    const down = pool.downCount;
    const text = poolTexts('status.servers-up', { up: pool.size - down, total: pool.size });
    const next = down === 0 ? undefined : down === pool.size ? statusFailed(text) : statusWaiting(text);
    if (next?.text === trouble?.text && next?.fill === trouble?.fill) return;
    trouble = next;
    node.status(trouble ?? own);
  };
  const stop = pool.onUpChange(show);
  show();
  node.on('close', () => stop());
  return (status) => {
    own = status;
    if (!trouble) node.status(status);
  };
}
