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
import type graphGenConfig from './graph-gen-config';
import { errorText, textOf } from '../boundary/outside';

interface JobEventsDef extends NodeDef {
  server: string;
  /** The events to send, separated by commas. */
  events?: string;
  /** `all` clients' jobs, or only `others'`. */
  clients?: string;
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

  function GraphGenJobEvents(this: Node, def: JobEventsDef): void {
    RED.nodes.createNode(this, def);
    setUp(this, def);
  }

  function setUp(node: Node, def: JobEventsDef): void {
    const config = RED.nodes.getNode(def.server) as graphGenConfig.GraphGenConfigNode | null;
    const connection = config?.connection;
    if (!connection) {
      node.status(statusFailed(text(config?.settingsError ? 'status.bad-config' : 'status.no-config')));
      node.warn(config?.settingsError ?? text('errors.no-config'));
      return;
    }
    let closing = false;
    let watcher: JobEvents | undefined;
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
        watcher = new JobEvents(connection, {
          events: eventsOf(def.events),
          clients: def.clients === 'others' ? 'others' : 'all',
          store,
          // The memory is of one server: another config node or address starts it anew.
          scope: `${def.server} ${connection.settings.baseUrl}`,
          emit: (event) =>
            node.send({ topic: event.topic, prompt_id: event.prompt_id, payload: event.payload }),
          onState: (state) => node.status(statusOf(state, text)),
          log: (level, message) => (level === 'warn' ? node.warn(message) : node.debug(message)),
        });
        watcher.start();
      })
      .catch((error: unknown) =>
        node.warn(`graph-gen: the job events node could not start: ${errorText(error)}`),
      );

    node.on('close', (removed: boolean, done: () => void) => {
      closing = true;
      watcher?.close();
      // Stopped: the memory is written for the next start; removed from the flows: it goes.
      void opening
        .then(() => (removed ? journal?.destroy() : journal?.close()))
        .catch(() => undefined)
        .then(() => done());
    });
  }

  RED.nodes.registerType(TYPE, GraphGenJobEvents);
};
