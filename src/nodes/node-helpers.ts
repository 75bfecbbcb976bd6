/**
 * The few things every node file does alike: evaluate a TypedInput, report a failure so a Catch node sees
 * it, and keep status texts short. Node files stay thin by calling these.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Node, NodeAPI, NodeMessage, NodeMessageInFlow, NodeStatus } from 'node-red';
import { ServiceError, invalidInput } from '../http/errors';
import type { GenerationConnection } from '../generation/connection';
import type { ConnectionState } from '../generation/jobs/socket-manager';
import type { GraphGenConfigNode } from './graph-gen-config-node';
import { errorText, textOf } from '../boundary/outside';
import { migrateConfig } from './config-versions';

/** Values for a catalog text's `__name__` placeholders. */
export type TextValues = Record<string, string | number>;

/** A node type's runtime text by its key in the type's catalog (`status.done`), with placeholders filled. */
export type Texts = (key: string, values?: TextValues) => string;

/** The English catalogs beside the built node files, read once per type. */
const englishCatalogs = new Map<string, Record<string, unknown>>();

function englishText(type: string, key: string): string | undefined {
  let catalog = englishCatalogs.get(type);
  if (!catalog) {
    try {
      const file = path.join(__dirname, 'locales', 'en-US', `${type}.json`);
      catalog = (JSON.parse(fs.readFileSync(file, 'utf8')) as Record<string, Record<string, unknown>>)[type];
    } catch {
      catalog = undefined;
    }
    catalog ??= {};
    englishCatalogs.set(type, catalog);
  }
  let found: unknown = catalog;
  for (const part of key.split('.')) found = (found as Record<string, unknown> | undefined)?.[part];
  return typeof found === 'string' ? found : undefined;
}

function fill(template: string, values: TextValues): string {
  return template.replace(/__(\w+)__/g, (placeholder, name: string) =>
    Object.hasOwn(values, name) ? String(values[name]) : placeholder,
  );
}

/**
 * The runtime texts (statuses, error sentences) of one node type from its message catalog
 * (`nodes/locales/<lang>/<type>.json`) in the runtime's language, in English when Node-RED has not loaded
 * the catalog (node-red-node-test-helper does not). Each key is looked up once: a lookup costs tens of
 * microseconds and statuses are set per message. Placeholders are `__name__`, as Node-RED writes them.
 */
export function catalogTexts(RED: NodeAPI, type: string): Texts {
  const templates = new Map<string, string>();
  return (key, values) => {
    let template = templates.get(key);
    if (template === undefined) {
      const full = `${type}.${key}`;
      const translated = RED._(full);
      template =
        typeof translated === 'string' && translated !== '' && translated !== full
          ? translated
          : (englishText(type, key) ?? key);
      templates.set(key, template);
    }
    return values ? fill(template, values) : template;
  };
}

/** Evaluates a TypedInput property for one message (callback form: JSONata and async context need it). */
export function evaluateProperty(
  RED: NodeAPI,
  node: Node,
  msg: NodeMessage,
  value: string | undefined,
  type: string | undefined,
): Promise<unknown> {
  return new Promise((resolve, reject) => {
    if (value === undefined || value === '') {
      resolve(undefined);
      return;
    }
    RED.util.evaluateNodeProperty(value, type ?? 'str', node, msg, (error: Error | null, result: unknown) =>
      error ? reject(error) : resolve(result),
    );
  });
}

/**
 * Any thrown value as an Error with a code, so `msg.error.code` is always set. One that is not a
 * ServiceError was not foreseen: `internal_error`, not the user's input.
 */
export function asServiceError(error: unknown): ServiceError {
  if (error instanceof ServiceError) return error;
  const message = errorText(error);
  return new ServiceError('internal_error', `unexpected failure in the node: ${message}`);
}

/** Sets a node's status (the node's own `status`, or one that knows about the shared socket's trouble). */
export type StatusFunction = (status: NodeStatus) => void;

/** Status texts stay under 20 characters (the editor cuts longer ones off under the node). */
const MAX_STATUS_TEXT = 19;

export function shortText(text: string): string {
  return text.length > MAX_STATUS_TEXT ? `${text.slice(0, MAX_STATUS_TEXT - 1)}…` : text;
}

/** Waiting on the service (a request or a job in flight): yellow ring. */
export function statusWaiting(text: string): NodeStatus {
  return { fill: 'yellow', shape: 'ring', text: shortText(text) };
}

/** Working or done, all well: green dot. */
export function statusOk(text: string): NodeStatus {
  return { fill: 'green', shape: 'dot', text: shortText(text) };
}

export function statusFailed(reason: string): NodeStatus {
  return { fill: 'red', shape: 'ring', text: shortText(reason) };
}

/** Codes whose words would not fit a status (under 20 characters). */
const SHORT_REASONS: Partial<Record<string, string>> = {
  insufficient_credits: 'no credits',
  subscription_inactive: 'no subscription',
};

/**
 * Ends a message in failure: red ring with the error code, and `done(error)` so Node-RED hands the
 * message to Catch nodes with `message`, `code` and `cause` in `msg.error`.
 */
export function fail(
  node: Node,
  done: (error?: Error) => void,
  error: unknown,
  setStatus: StatusFunction = (status) => node.status(status),
): void {
  const serviceError = asServiceError(error);
  setStatus(statusFailed(SHORT_REASONS[serviceError.code] ?? serviceError.code.replace(/_/g, ' ')));
  done(serviceError);
}

/** A whole-value `${VAR}` reference replaced by the environment's value, as Node-RED does at deploy. */
export function resolveEnvReference(value: string | undefined): string | undefined {
  const reference = /^\$\{(\S+)\}$/.exec(value ?? '');
  return reference ? process.env[reference[1]] : value;
}

export type SendFunction = (msg: NodeMessage | Array<NodeMessage | NodeMessage[] | null>) => void;

/** How long a closing node waits for its stopped requests to clean up. */
const CLOSE_WAIT_MS = 1_000;

/**
 * Wires a request-per-message node: `handle` runs for each message with a signal that aborts when the
 * node closes (redeploy); a failure ends the message through `fail` so Catch nodes see it, while a message
 * stopped by the close is not a failure of the flow; close aborts what is in flight and clears the status.
 */
export function handleMessages<M extends NodeMessageInFlow>(
  node: Node,
  handle: (msg: M, send: SendFunction, signal: AbortSignal) => Promise<void>,
  setStatus?: StatusFunction,
): void {
  const running = new Map<AbortController, Promise<void>>();
  node.on('input', (msg, send, done) => {
    const controller = new AbortController();
    const settled = handle(msg as M, send, controller.signal).then(
      () => {
        running.delete(controller);
        done();
      },
      (error: unknown) => {
        running.delete(controller);
        if (controller.signal.aborted) done();
        else fail(node, done, error, setStatus);
      },
    );
    running.set(controller, settled);
  });
  node.on('close', (_removed: boolean, done: () => void) => {
    // Stop what is under way, and give it a moment to clean up after itself (a partial download's
    // temporary file) before the node is reported closed; never longer than CLOSE_WAIT_MS.
    const stopping = [...running.values()];
    for (const controller of running.keys()) controller.abort();
    running.clear();
    node.status({});
    let timer: NodeJS.Timeout | undefined;
    void Promise.race([
      Promise.allSettled(stopping),
      new Promise<void>((resolve) => (timer = setTimeout(resolve, CLOSE_WAIT_MS))),
    ]).then(() => {
      clearTimeout(timer);
      done();
    });
  });
}

/** What Node-RED's editor sends for a password credential that was left unchanged. */
const UNCHANGED_PASSWORD = '__PWRD__';

export interface ConnectionTestTarget<S> {
  /** The settings to test: as deployed (resolved) when the dialog shows the deployed ones, else as typed. */
  settings: S;
  /** The `apiKey` credential to use. */
  key?: string;
  /** Every credential asked for (`options.credentials`) to use, `apiKey` among them; unset ones absent. */
  credentials: Record<string, string | undefined>;
  /** Why the test cannot be made as asked, in a sentence (then nothing is sent). */
  refusal?: string;
  /**
   * The dialog shows a deployed node's settings as saved and typed no key: what it asks reaches only what
   * the deployed node reaches anyway (a read, not a change of where a key goes).
   */
  asSaved: boolean;
}

/** `${VAR}` anywhere in a text: what a deploy reads from the environment, and only a deploy may. */
const ENV_REFERENCE = /\$\{/;

/**
 * What a dialog's "test connection" may use. The dialog sends the settings as typed, the credentials it holds
 * (a password unchanged since it was loaded comes as Node-RED's placeholder) and the node's id. Stored
 * credentials go only to the address they were deployed with: they are used for a deployed node of this very
 * type whose saved settings are the ones sent (both read through migrateConfig: a setting the saved node or
 * the dialog lacks is its old default), and then the deployed settings (with their `${VAR}` references
 * resolved, as the deploy did) are tested. A text credential (a user name: the editor holds it as stored)
 * sent as it is stored counts as not typed; a password one counts as typed unless it is the placeholder. Typed
 * settings are tested as typed, with typed credentials only. Only a deployed node resolves its variables: a
 * typed address or a typed credential written with `${...}` is refused, so the editor cannot make the runtime
 * read its environment into an address, or send it as a key.
 */
export function connectionTestTarget<S extends object>(
  RED: NodeAPI,
  type: string,
  fields: Array<keyof S & string>,
  body: Partial<S> & { id?: unknown; apiKey?: unknown },
  texts: Texts,
  options: { credentials?: Record<string, 'password' | 'text'> } = {},
): ConnectionTestTarget<Partial<S>> {
  const kinds = options.credentials ?? { apiKey: 'password' };
  const names = Object.keys(kinds);
  let saved: Record<string, unknown> | undefined;
  if (typeof body.id === 'string' && body.id) {
    RED.nodes.eachNode((config) => {
      if (config.id === body.id && config.type === type) saved = migrateConfig(type, config);
    });
  }
  const text = (value: unknown) => textOf(value) ?? '';
  // The dialog's settings, as the editor holds the node: one saved before a setting existed lacks it.
  const sent = migrateConfig(type, Object.fromEntries(fields.map((field) => [field, body[field]])));
  const asDeployed =
    saved !== undefined &&
    fields.every((field) => text((saved as Record<string, unknown>)[field]) === text(sent[field]));
  const stored = (saved ? (RED.nodes.getCredentials(body.id as string) ?? {}) : {}) as Record<
    string,
    string | undefined
  >;
  const typed: Record<string, string> = {};
  for (const name of names) {
    const value = (body as Record<string, unknown>)[name];
    if (typeof value !== 'string' || value === UNCHANGED_PASSWORD) continue;
    if (kinds[name] === 'text' && asDeployed && value === (stored[name] ?? '')) continue;
    typed[name] = value;
  }
  const typedSettings = () => Object.fromEntries(fields.map((field) => [field, sent[field]])) as Partial<S>;
  if (Object.values(typed).some((value) => ENV_REFERENCE.test(value))) {
    return {
      settings: typedSettings(),
      credentials: {},
      refusal: texts('errors.env-in-settings'),
      asSaved: false,
    };
  }
  const given = (values: Record<string, string | undefined>) => {
    const credentials: Record<string, string | undefined> = {};
    for (const name of names) if (values[name]) credentials[name] = values[name];
    return { credentials, key: credentials.apiKey };
  };
  if (asDeployed) {
    const settings = Object.fromEntries(
      fields.map((field) => {
        const value = (saved as Record<string, unknown>)[field];
        return [field, typeof value === 'string' ? resolveEnvReference(value) : value];
      }),
    ) as Partial<S>;
    const values: Record<string, string | undefined> = {};
    for (const name of names) values[name] = name in typed ? typed[name] : resolveEnvReference(stored[name]);
    return { settings, ...given(values), asSaved: Object.keys(typed).length === 0 };
  }
  const settings = typedSettings();
  if (fields.some((field) => ENV_REFERENCE.test(text(sent[field])))) {
    return { settings, credentials: {}, refusal: texts('errors.env-in-settings'), asSaved: false };
  }
  return { settings, ...given(typed), asSaved: false };
}

/** The connection of a generation node's config node, or a refusal that says to pick one. */
export function generationConnection(RED: NodeAPI, serverId: string, texts: Texts): GenerationConnection {
  const config = RED.nodes.getNode(serverId) as GraphGenConfigNode | null;
  if (config?.settingsError) throw invalidInput(config.settingsError);
  if (!config?.connection) throw invalidInput(texts('errors.no-config'));
  return config.connection;
}

/** What the shared socket's trouble looks like in a node's status (await-job uses the same words). */
function troubleStatus(state: ConnectionState, texts: Texts): NodeStatus | undefined {
  if (state === 'unauthorized') return statusFailed(texts('status.unauthorized'));
  if (state === 'down') return statusWaiting(texts('status.reconnecting'));
  return undefined;
}

/**
 * Shows the config node's shared socket trouble ("reconnecting", "unauthorized") in this node's status
 * while it lasts, as await-job does, and the node's own latest status again when it ends: the node sets
 * its own statuses through the returned function (and passes it to `handleMessages`). A reconnect attempt
 * (`connecting`) does not end the trouble, so the status does not flicker between attempts. Registers
 * with the socket manager without opening the socket, and frees the registration when the node closes.
 */
export function showSocketTrouble(RED: NodeAPI, node: Node, serverId: string, texts: Texts): StatusFunction {
  const connection = (RED.nodes.getNode(serverId) as GraphGenConfigNode | null)?.connection;
  if (!connection) return (status) => node.status(status);
  let own: NodeStatus = {};
  let trouble: NodeStatus | undefined;
  const show = (state: ConnectionState): void => {
    if (state === 'connecting' && trouble) return;
    const next = troubleStatus(state, texts);
    if (next?.text === trouble?.text) return;
    trouble = next;
    node.status(trouble ?? own);
  };
  const sockets = connection.sockets();
  const deregister = sockets.register({ onConnectionState: (state) => show(state) });
  if (troubleStatus(sockets.state, texts)) show(sockets.state);
  node.on('close', () => deregister());
  return (status) => {
    own = status;
    if (!trouble) node.status(status);
  };
}
