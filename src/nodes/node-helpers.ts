/**
 * The few things every node file does alike: evaluate a TypedInput, report a failure so a Catch node sees
 * it, and keep status texts short. Node files stay thin by calling these.
 */
import type { Node, NodeAPI, NodeMessage, NodeMessageInFlow, NodeStatus } from 'node-red';
import { ServiceError, invalidInput } from '../http/errors';
import type { GenerationConnection } from '../generation/connection';
import type { GraphGenConfigNode } from './graph-gen-config';

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
  const message = error instanceof Error ? error.message : String(error);
  return new ServiceError('internal_error', `unexpected failure in the node: ${message}`);
}

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
export function fail(node: Node, done: (error?: Error) => void, error: unknown): void {
  const serviceError = asServiceError(error);
  node.status(statusFailed(SHORT_REASONS[serviceError.code] ?? serviceError.code.replace(/_/g, ' ')));
  done(serviceError);
}

/**
 * Replaces `${VAR}` references with the environment's values, as Node-RED does for node properties and
 * credentials at deploy time. Admin endpoints (test connection) get the dialog's raw values and need this.
 */
export function substituteEnvVars(value: string): string;
export function substituteEnvVars(value: string | undefined): string | undefined;
export function substituteEnvVars(value: string | undefined): string | undefined {
  return value?.replace(/\$\{([^}]+)\}/g, (_match, name: string) => process.env[name.trim()] ?? '');
}

/** Every string field of a dialog's settings with `${VAR}` references replaced. */
export function substituteEnvVarsIn<T extends object>(settings: T): T {
  return Object.fromEntries(
    Object.entries(settings).map(([key, value]) => [
      key,
      typeof value === 'string' ? substituteEnvVars(value) : value,
    ]),
  ) as T;
}

export type SendFunction = (msg: NodeMessage | Array<NodeMessage | NodeMessage[] | null>) => void;

/**
 * Wires a request-per-message node: `handle` runs for each message with a signal that aborts when the
 * node closes (redeploy); a failure ends the message through `fail` so Catch nodes see it, while a message
 * stopped by the close is not a failure of the flow; close aborts what is in flight and clears the status.
 */
export function handleMessages<M extends NodeMessageInFlow>(
  node: Node,
  handle: (msg: M, send: SendFunction, signal: AbortSignal) => Promise<void>,
): void {
  const running = new Set<AbortController>();
  node.on('input', (msg, send, done) => {
    const controller = new AbortController();
    running.add(controller);
    handle(msg as M, send, controller.signal).then(
      () => {
        running.delete(controller);
        done();
      },
      (error: unknown) => {
        running.delete(controller);
        if (controller.signal.aborted) done();
        else fail(node, done, error);
      },
    );
  });
  node.on('close', (_removed: boolean, done: () => void) => {
    for (const controller of running) controller.abort();
    running.clear();
    node.status({});
    done();
  });
}

/** What Node-RED's editor sends for a password credential that was left unchanged. */
const UNCHANGED_PASSWORD = '__PWRD__';

/**
 * The key a "test connection" request means: the one typed in the dialog, or the node's stored one when the
 * field was left unchanged (the editor never sends a stored key back), with `${VAR}` resolved as a deploy does.
 */
export function keyForConnectionTest(
  RED: NodeAPI,
  body: { id?: unknown; apiKey?: unknown },
): string | undefined {
  let key = typeof body.apiKey === 'string' ? body.apiKey : undefined;
  if ((key === undefined || key === UNCHANGED_PASSWORD) && typeof body.id === 'string' && body.id) {
    key = (RED.nodes.getCredentials(body.id) as { apiKey?: string } | undefined)?.apiKey;
  }
  if (key === UNCHANGED_PASSWORD) return undefined;
  return substituteEnvVars(key) || undefined;
}

/** The connection of a generation node's config node, or a refusal that says to pick one. */
export function generationConnection(RED: NodeAPI, serverId: string): GenerationConnection {
  const config = RED.nodes.getNode(serverId) as GraphGenConfigNode | null;
  if (config?.settingsError) throw invalidInput(config.settingsError);
  if (!config?.connection) {
    throw invalidInput('no graph-gen-config is chosen in this node: pick one in its dialog');
  }
  return config.connection;
}
