/**
 * How a graph-gen-config node's settings and credentials, as saved or as a dialog holds them, become what its
 * connection is made with: the dialect, how requests prove who sends them, the limits, and the TLS and proxy of
 * the core nodes chosen (else the environment's proxy). Apart from the node (graph-gen-config.ts) because the
 * node and its dialogs (test connection, definitions, conversion) read settings the same way. Node-RED's API is
 * asked only for the chosen tls-config and http proxy nodes and its proxy settings.
 */
import type { NodeAPI, NodeDef } from 'node-red';
import { GENERATION_LIMITS, type GenerationLimits } from '../generation/connection';
import type { DialectName } from '../generation/dialects/dialect';
import type { AuthScheme, AuthSettings } from '../http/auth';
import { invalidInput } from '../http/errors';
import { proxyFromEnvironment, proxyFromNode, type EnvironmentProxyOptions } from '../http/proxy';
import { tlsOptionsOf, type TransportSettings } from '../http/transport';
import { numberOf } from '../boundary/outside';
import type { GraphGenCredentials } from './graph-gen-config-node';
import type { Texts } from './node-helpers';

/** The settings, each present: migrateConfig (config-versions.ts) gives an older node its old defaults. */
export interface GraphGenConfigDef extends NodeDef {
  baseUrl: string;
  /** How the server is spoken to: today's API (`comfyui`) or `comfy-api-v2`. */
  dialect: DialectName;
  /** How requests prove who sends them. */
  authType: AuthScheme;
  /** The header's name of the `header` scheme. */
  authHeader: string;
  /** Bearer and header: the secret also as `?token=` on the socket. */
  tokenInQuery: boolean;
  /** A core tls-config node's id, for https and wss; '' for none. */
  tls: string;
  /** A core http proxy node's id; '': the environment's http_proxy, https_proxy and no_proxy. */
  proxy: string;
  partnerKeyField: string;
  /** Limits (blank = the default): MiB, MiB, seconds, MiB. */
  answerLimitMiB: string | number;
  listLimitMiB: string | number;
  requestTimeout: string | number;
  keptEventsMiB: string | number;
}

const MIB = 1024 * 1024;

/** The dialect a node's settings (or a dialog's request) name; anything else is today's API. */
export function dialectOf(settings: { dialect?: unknown }): DialectName {
  return settings.dialect === 'comfy-api-v2' ? 'comfy-api-v2' : 'comfyui';
}

/** A positive number setting, else the default. */
function positive(value: string | number | undefined, unit: number, fallback: number): number {
  const number = numberOf(value);
  return number !== undefined && number > 0 ? number * unit : fallback;
}

export function limitsOf(def: GraphGenConfigDef): GenerationLimits {
  return {
    answerBytes: positive(def.answerLimitMiB, MIB, GENERATION_LIMITS.answerBytes),
    listBytes: positive(def.listLimitMiB, MIB, GENERATION_LIMITS.listBytes),
    requestTimeoutMs: positive(def.requestTimeout, 1000, GENERATION_LIMITS.requestTimeoutMs),
    keptEventBytes: positive(def.keptEventsMiB, MIB, GENERATION_LIMITS.keptEventBytes),
  };
}

/**
 * The settings that say how the service is reached, as the node and its dialogs hold them (a dialog's, like a
 * saved node's, read through migrateConfig: one saved before a setting existed has its old default).
 */
export type AccessSettings = Partial<
  Pick<GraphGenConfigDef, 'dialect' | 'authType' | 'authHeader' | 'tokenInQuery' | 'tls' | 'proxy'>
>;

export const ACCESS_FIELDS: Array<keyof AccessSettings> = [
  'dialect',
  'authType',
  'authHeader',
  'tokenInQuery',
  'tls',
  'proxy',
];
export const CREDENTIAL_KINDS = { apiKey: 'password', username: 'text', password: 'password' } as const;

/**
 * How requests prove who sends them. The API-key scheme is left to `apiKey` (a key set = a cloud service), as
 * before there was a choice; every other scheme is `auth`, and never makes a cloud service of a server (one it
 * does not know is refused there, in a sentence).
 */
export function authOf(
  settings: AccessSettings,
  credentials: GraphGenCredentials,
): { apiKey?: string; auth?: AuthSettings } {
  const scheme = settings.authType;
  if (scheme === 'apiKey') return { apiKey: credentials.apiKey || undefined };
  return {
    auth: {
      scheme,
      secret: credentials.apiKey || undefined,
      username: credentials.username || undefined,
      password: credentials.password || undefined,
      headerName: settings.authHeader,
      tokenInQuery: settings.tokenInQuery === true,
    },
  };
}

/** The core tls-config node's options, as its own `addTLSOptions` gives them. */
interface TlsConfigNode {
  valid?: boolean;
  addTLSOptions(options: Record<string, unknown>): Record<string, unknown>;
}

/** The core http proxy node. */
interface HttpProxyNode {
  url?: string;
  noproxy?: string[];
  credentials?: { username?: string; password?: string };
}

/**
 * The TLS settings (of the chosen tls-config node) and the proxy (of the chosen http proxy node, else the
 * environment's, read as Node-RED's settings.js `proxyOptions` say), as the core http request node takes them.
 * Undefined when neither applies. Refuses a chosen node that is not deployed or could not read its files.
 */
export function transportOf(
  RED: NodeAPI,
  settings: AccessSettings,
  texts: Texts,
): TransportSettings | undefined {
  const transport: TransportSettings = {};
  if (settings.tls) {
    const node = RED.nodes.getNode(settings.tls) as unknown as TlsConfigNode | null;
    if (!node || typeof node.addTLSOptions !== 'function') throw invalidInput(texts('errors.no-tls'));
    if (node.valid === false) throw invalidInput(texts('errors.tls-invalid'));
    transport.tls = tlsOptionsOf(node.addTLSOptions({}));
  }
  if (settings.proxy) {
    const node = RED.nodes.getNode(settings.proxy) as unknown as HttpProxyNode | null;
    if (!node) throw invalidInput(texts('errors.no-proxy'));
    transport.proxy = proxyFromNode({ ...node, ...node.credentials });
  } else {
    const options = (RED.settings as unknown as { proxyOptions?: EnvironmentProxyOptions }).proxyOptions;
    transport.proxy = proxyFromEnvironment(process.env, options);
  }
  if (!transport.proxy) delete transport.proxy;
  return transport.tls || transport.proxy ? transport : undefined;
}
