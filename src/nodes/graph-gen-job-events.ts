/**
 * graph-gen-job-events: a msg for every job of the config node's server, whoever submitted it (the server's own
 * page, other programs, this flow): `queued`, `started`, `completed`, `failed`, `cancelled`. The watching is
 * JobEvents' (src/generation/jobs/job-events.ts); this file reads the settings, keeps the node's memory of the
 * jobs it told under the user dir (a journal, `job-events-<node id>.jsonl`), sends and sets the status.
 */
import type { Node, NodeAPI, NodeDef, NodeStatus } from 'node-red';
import { Journal } from '../persist/journal';
import {
  JOB_EVENT_TOPICS,
  JobEvents,
  type JobEventTopic,
  type WatchState,
} from '../generation/jobs/job-events';
import type { KeptRecord, MemoryStore } from '../generation/jobs/job-event-memory';
import { catalogTexts, statusFailed, statusOk, statusWaiting, type Texts } from './node-helpers';
import { nodeFile, sweepNodeFiles } from './node-state';
import { generationTarget } from './generation-target';
import type { GenerationConnection } from '../generation/connection';
import type { ServerRef } from '../generation/pool/server-pool';
import { errorText, textOf } from '../boundary/outside';
import { migrateConfig } from './config-versions';

/** The settings, each present: migrateConfig (config-versions.ts) gives an older node its old defaults. */
interface JobEventsDef extends NodeDef {
  server: string;
  /** A graph-gen-pool node: every server of the pool is watched (then `server` is not used). */
  pool: string;
  /** The events to send, separated by commas. */
  events: string;
  /** `all` clients' jobs, or only `others'`. */
  clients: string;
}

const TYPE = 'graph-gen-job-events';
const PREFIX = 'job-events-';
const SUFFIX = '.jsonl';
const DEFAULT_EVENTS: JobEventTopic[] = ['completed', 'failed', 'cancelled'];

/** The events setting as a list; nothing valid in it: the default ones. */
function eventsOf(setting: unknown): JobEventTopic[] {
  const chosen = (textOf(setting) ?? '')
    .split(',')
    .map((word) => word.trim())
    .filter((word): word is JobEventTopic => (JOB_EVENT_TOPICS as readonly string[]).includes(word));
  return chosen.length > 0 ? chosen : DEFAULT_EVENTS;
}

function statusOf(state: WatchState, text: Texts): NodeStatus {
  switch (state) {
    case 'watching':
      return statusOk(text('status.watching'));
    case 'polling':
      return statusWaiting(text('status.polling'));
    case 'unreadable':
      return statusFailed(text('status.unreadable'));
    case 'unauthorized':
      return statusFailed(text('status.unauthorized'));
    default:
      return statusWaiting(text('status.starting'));
  }
}

/** The worst of several watchers' states first: what needs the user's hand shows over what goes well. */
const STATE_ORDER: WatchState[] = ['unauthorized', 'unreadable', 'polling', 'starting', 'watching'];

/** One server's part of a node's memory (a pool's servers share the node's journal, each under its own prefix). */
function partOf(store: MemoryStore, prefix: string): MemoryStore {
  return {
    entries: () =>
      store
        .entries()
        .filter(([key]) => key.startsWith(prefix))
        .map(([key, value]) => [key.slice(prefix.length), value]),
    set: (key, value) => store.set(prefix + key, value),
    delete: (key) => store.delete(prefix + key),
  };
}

/** A memory that lasts this run only: where the state folder cannot be read. */
function memoryOnly(): MemoryStore {
  const map = new Map<string, KeptRecord>();
  return {
    entries: () => [...map],
    set: (key, value) => void map.set(key, value),
    delete: (key) => void map.delete(key),
  };
}

export = function (RED: NodeAPI): void {
  const text = catalogTexts(RED, TYPE);

  function GraphGenJobEvents(this: Node, saved: NodeDef): void {
    RED.nodes.createNode(this, saved);
    setUp(
      this,
      migrateConfig<JobEventsDef>(TYPE, saved, (newer) => this.warn(text('warnings.newer-settings', newer))),
    );
  }

  function setUp(node: Node, def: JobEventsDef): void {
    // One server, or each of the pool's (their events then carry msg.server).
    let servers: Array<{ connection: GenerationConnection; server?: ServerRef }>;
    try {
      const target = generationTarget(RED, def, text);
      servers = target.pool
        ? target.pool.members.map((member) => ({
            connection: member.connection,
            server: target.pool.refOf(member),
          }))
        : [{ connection: target.connection }];
    } catch (error) {
      const message = errorText(error);
      node.status(
        statusFailed(text(message === text('errors.no-config') ? 'status.no-config' : 'status.bad-config')),
      );
      node.warn(message);
      return;
    }
    let closing = false;
    const watchers: JobEvents[] = [];
    const states: WatchState[] = servers.map(() => 'starting');
    const showState = (): void => {
      const worst = STATE_ORDER.find((state) => states.includes(state)) ?? 'starting';
      node.status(statusOf(worst, text));
    };
    let journal: Journal<KeptRecord> | undefined;
    const log = (message: string) => node.warn(message);

    node.status(statusOf('starting', text));
    sweepNodeFiles(RED, TYPE, PREFIX, SUFFIX);
    const opening = Journal.open<KeptRecord>(nodeFile(RED, PREFIX, node.id, SUFFIX), { log })
      .then((opened) => (journal = opened))
      .catch((error: unknown) => {
        node.warn(
          `graph-gen: the jobs told before cannot be read (${errorText(error)}): after a restart some may be told again`,
        );
        return memoryOnly();
      })
      .then((store) => {
        if (closing) return;
        servers.forEach(({ connection, server }, index) => {
          const watcher = new JobEvents(connection, {
            events: eventsOf(def.events),
            clients: def.clients === 'others' ? 'others' : 'all',
            // A pool's servers each keep their own part (the journal's keys of a lone server have no prefix).
            store: server ? partOf(store, `${server.id}:`) : store,
            // The memory is of one server: another config node or address starts it anew.
            scope: `${server?.id ?? def.server} ${connection.settings.baseUrl}`,
            emit: (event) =>
              node.send({
                topic: event.topic,
                prompt_id: event.prompt_id,
                payload: event.payload,
                ...(server ? { server } : {}),
              }),
            onState: (state) => {
              states[index] = state;
              showState();
            },
            log: (level, message) => (level === 'warn' ? node.warn(message) : node.debug(message)),
          });
          watchers.push(watcher);
          watcher.start();
        });
      })
      .catch((error: unknown) =>
        node.warn(`graph-gen: the job events node could not start: ${errorText(error)}`),
      );

    node.on('close', (removed: boolean, done: () => void) => {
      closing = true;
      for (const watcher of watchers) watcher.close();
      // Stopped: the memory is written for the next start; removed from the flows: it goes.
      void opening
        .then(() => (removed ? journal?.destroy() : journal?.close()))
        .catch(() => undefined)
        .then(() => done());
    });
  }

  RED.nodes.registerType(TYPE, GraphGenJobEvents);
};
