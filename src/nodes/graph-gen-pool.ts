/**
 * graph-gen-pool: several graph-gen-config nodes behind one name (palette: "server pool"). Each member keeps its
 * own address, credential, TLS, proxy and dialect; the pool (generation/pool/server-pool.ts) chooses a member per
 * job and remembers each job's member in `<userDir>/graph-gen/pool-<id>.jsonl`, so a msg that lost msg.server
 * still finds it after a restart. The pool is made when the first flow node asks for it (Node-RED has made
 * every config node by then), and closed with the node.
 */
import type { Node, NodeAPI, NodeDef } from 'node-red';
import { ServerPool, type PoolMember } from '../generation/pool/server-pool';
import { JobHomes } from '../generation/pool/job-homes';
import { MAX_POOL_MEMBERS, strategyOf } from '../generation/pool/pool-routing';
import { catalogTexts } from './node-helpers';
import { nodeFile, sweepNodeFiles } from './node-state';
import type graphGenConfig from './graph-gen-config';
import { errorText } from '../boundary/outside';
import { migrateConfig } from './config-versions';

/** The settings as migrateConfig gives them (config-versions.ts): members in server1 .. server8, and the strategy. */
type PoolDef = NodeDef & { strategy: string } & Record<string, unknown>;

const PREFIX = 'pool-';
const SUFFIX = '.jsonl';

/** The member slots' property names, in order: server1 .. server8. */
const MEMBER_SLOTS = Array.from({ length: MAX_POOL_MEMBERS }, (_, index) => `server${index + 1}`);

/** A member's address as msg.server names it: no user, password or query (which may hold a key). */
function shownAddress(baseUrl: string): string {
  try {
    const address = new URL(baseUrl);
    return `${address.origin}${address.pathname === '/' ? '' : address.pathname}`;
  } catch {
    return 'a server';
  }
}

function graphGenPool(RED: NodeAPI): void {
  const texts = catalogTexts(RED, 'graph-gen-pool');

  function GraphGenPool(this: graphGenPool.GraphGenPoolNode, saved: NodeDef): void {
    RED.nodes.createNode(this, saved);
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- the pool is made later, on first use
    const node = this;
    const def = migrateConfig<PoolDef>('graph-gen-pool', saved, (newer) =>
      node.warn(texts('warnings.newer-settings', newer)),
    );
    const ids = [
      ...new Set(
        MEMBER_SLOTS.map((slot) => def[slot]).filter(
          (id): id is string => typeof id === 'string' && id !== '',
        ),
      ),
    ];
    let pool: ServerPool | undefined;
    let closed = false;
    let homesOpening: Promise<void> | undefined;

    node.pool = () => {
      if (pool || closed) return pool;
      const members: PoolMember[] = [];
      const left: string[] = [];
      for (const id of ids) {
        const config = RED.nodes.getNode(id) as graphGenConfig.GraphGenConfigNode | null;
        const connection = config?.connection;
        if (!connection) {
          left.push(config?.settingsError ?? texts('errors.member-missing', { id }));
          continue;
        }
        const name = (config as { name?: unknown }).name;
        members.push({
          id,
          name:
            typeof name === 'string' && name.trim() !== ''
              ? name.trim()
              : shownAddress(connection.settings.baseUrl),
          connection,
        });
      }
      for (const reason of left) node.warn(texts('warnings.member-left-out', { reason }));
      if (members.length === 0) {
        node.settingsError = texts('errors.no-members');
        return undefined;
      }
      pool = new ServerPool(members, {
        strategy: strategyOf(def.strategy),
        log: (level, message) => (level === 'warn' ? node.warn(message) : node.debug(message)),
      });
      const made = pool;
      homesOpening = (async () => {
        try {
          sweepNodeFiles(RED, 'graph-gen-pool', PREFIX, SUFFIX);
          const homes = await JobHomes.open(nodeFile(RED, PREFIX, node.id, SUFFIX), (message) =>
            node.warn(message),
          );
          if (closed) await homes.close();
          else made.useHomes(homes);
        } catch (error) {
          node.warn(texts('warnings.homes-unreadable', { error: errorText(error) }));
        }
      })();
      made.readingHomes(homesOpening);
      return pool;
    };

    node.on('close', (removed: boolean, done: () => void) => {
      closed = true;
      const closing = pool;
      pool = undefined;
      void Promise.resolve(homesOpening)
        .then(() => closing?.close())
        .then(() => (removed ? closing?.forgetJobs() : undefined))
        .catch(() => undefined)
        .then(() => done());
    });
  }

  RED.nodes.registerType('graph-gen-pool', GraphGenPool);
}

// eslint-disable-next-line @typescript-eslint/no-namespace
namespace graphGenPool {
  export type GraphGenPoolNode = Node & {
    /** The pool, made on first use; undefined when no member makes a connection (`settingsError` says why). */
    pool: () => ServerPool | undefined;
    settingsError?: string;
  };
}

export = graphGenPool;
