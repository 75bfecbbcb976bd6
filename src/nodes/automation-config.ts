/**
 * automation-config: where the automation service is (self-hosted or cloud, API version), its key, and the
 * one keep-alive connection pool every list node that names this config shares. The pool closes when the
 * node does (redeploy, removal). Also serves the dialog's "test connection" button.
 */
import type { Node, NodeAPI, NodeDef } from 'node-red';
import type { Request, Response } from 'express';
import { AutomationClient, DEFAULT_KEY_HEADER, type AutomationSettings } from '../automation/client';
import type { RetryPolicy } from '../http/retry';
import { DEFAULT_RETRY_POLICY } from '../http/retry';
import { asServiceError, catalogTexts, connectionTestTarget, type Texts } from './node-helpers';
import { numberOf } from '../boundary/outside';
import { migrateConfig } from './config-versions';

/**
 * The settings as migrateConfig gives them (config-versions.ts): a node saved without one has its old default;
 * the address settings (host, port, path prefix, instance address) may be absent, as blank.
 */
interface AutomationConfigDef extends NodeDef {
  deployment: string;
  protocol: string;
  host?: string;
  port?: string | number;
  pathPrefix?: string;
  instanceUrl?: string;
  apiVersion: string | number;
  headerName: string;
  /** Attempts after the first for network failures and 5xx (blank = 3). */
  retries: string | number;
  /** The first retry's longest wait in ms, doubled each time (blank = 250). */
  retryDelay: string | number;
  /** The largest page read, MiB (blank = 64). */
  pageLimitMiB: string | number;
  /** How long a page request may take, seconds (blank = 120). */
  requestTimeout: string | number;
}

interface AutomationCredentials {
  apiKey?: string;
}

interface AutomationConfigNode extends Node<AutomationCredentials> {
  /** The client and its pool; undefined when the settings could not make an address. */
  client?: AutomationClient;
  /** Why there is no client, in a sentence. */
  settingsError?: string;
}

function numberSetting(value: string | number | undefined, fallback: number, min: number): number {
  const number = numberOf(value);
  return number !== undefined && number >= min ? number : fallback;
}

function retryPolicy(def: Partial<AutomationConfigDef>): RetryPolicy {
  const retries = Math.floor(numberSetting(def.retries, DEFAULT_RETRY_POLICY.attempts - 1, 0));
  const baseDelayMs = numberSetting(def.retryDelay, DEFAULT_RETRY_POLICY.baseDelayMs, 0);
  return {
    attempts: retries + 1,
    baseDelayMs,
    maxDelayMs: Math.max(baseDelayMs, DEFAULT_RETRY_POLICY.maxDelayMs),
  };
}

/** The settings that say where requests go: a stored key is tested only toward these as deployed. */
const ADDRESS_FIELDS: Array<keyof AutomationConfigDef & string> = [
  'deployment',
  'protocol',
  'host',
  'port',
  'pathPrefix',
  'instanceUrl',
  'apiVersion',
  'headerName',
];

function clientSettings(def: Partial<AutomationConfigDef>, apiKey: string | undefined): AutomationSettings {
  return {
    deployment: def.deployment === 'cloud' ? 'cloud' : 'self-hosted',
    protocol: def.protocol,
    host: def.host,
    port: def.port,
    pathPrefix: def.pathPrefix,
    instanceUrl: def.instanceUrl,
    apiVersion: def.apiVersion,
    headerName: def.headerName || DEFAULT_KEY_HEADER,
    apiKey: apiKey || undefined,
    retry: retryPolicy(def),
    maxPageBytes: numberSetting(def.pageLimitMiB, 64, 0.001) * 1024 * 1024,
    totalTimeoutMs: numberSetting(def.requestTimeout, 120, 0.001) * 1000,
  };
}

/** One sentence about what happened when the first page was asked for with limit 1. */
async function testConnection(
  settings: AutomationSettings,
  texts: Texts,
): Promise<{ ok: boolean; message: string }> {
  let client: AutomationClient;
  try {
    // One attempt and a short wait: a person is looking at the dialog.
    client = new AutomationClient({
      ...settings,
      retry: { attempts: 1, baseDelayMs: 0, maxDelayMs: 0 },
      timeoutMs: 10_000,
    });
  } catch (error) {
    return { ok: false, message: texts('test.no-address', { message: asServiceError(error).message }) };
  }
  try {
    const page = await client.listPage({ limit: 1 });
    const count = page.total ?? (page.nextCursor ? undefined : page.data.length);
    const listed =
      count === undefined
        ? texts('test.several')
        : count === 0
          ? texts('test.none')
          : count === 1
            ? texts('test.one')
            : texts('test.many', { count });
    return { ok: true, message: texts('test.connected', { url: client.baseUrl, listed }) };
  } catch (error) {
    const serviceError = asServiceError(error);
    if (serviceError.code === 'unauthorized') {
      return {
        ok: false,
        message: texts('test.refused', { url: client.baseUrl, status: serviceError.cause.status ?? 401 }),
      };
    }
    if (serviceError.code === 'network') {
      return {
        ok: false,
        message: texts('test.unreachable', { url: client.baseUrl, message: serviceError.message }),
      };
    }
    return {
      ok: false,
      message: texts('test.failed', { url: client.baseUrl, message: serviceError.message }),
    };
  } finally {
    await client.close();
  }
}

export = function (RED: NodeAPI) {
  const texts = catalogTexts(RED, 'automation-config');

  function AutomationConfig(this: AutomationConfigNode, saved: NodeDef) {
    RED.nodes.createNode(this, saved);
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- handlers below need the node
    const node = this;
    const def = migrateConfig<AutomationConfigDef>('automation-config', saved, (newer) =>
      node.warn(texts('warnings.newer-settings', newer)),
    );
    try {
      node.client = new AutomationClient(clientSettings(def, node.credentials?.apiKey));
    } catch (error) {
      node.settingsError = asServiceError(error).message;
    }
    node.on('close', (_removed: boolean, done: () => void) => {
      const client = node.client;
      node.client = undefined;
      if (!client) {
        done();
        return;
      }
      client.close().then(done, done);
    });
  }

  RED.nodes.registerType<AutomationConfigNode, NodeDef, unknown, AutomationCredentials>(
    'automation-config',
    AutomationConfig,
    {
      credentials: { apiKey: { type: 'password' } },
    },
  );

  RED.httpAdmin.post(
    '/graph-gen/automation-config/test',
    RED.auth.needsPermission('automation-config.write'),
    (req: Request, res: Response) => {
      const body = (req.body ?? {}) as Partial<AutomationConfigDef> & { apiKey?: string };
      const target = connectionTestTarget<AutomationConfigDef>(
        RED,
        'automation-config',
        ADDRESS_FIELDS,
        body,
        texts,
      );
      if (target.refusal) {
        res.json({ ok: false, message: target.refusal });
        return;
      }
      const settings = { ...target.settings, retries: body.retries, retryDelay: body.retryDelay };
      testConnection(clientSettings(settings, target.key), texts).then(
        (answer) => res.json(answer),
        (error: unknown) => res.json({ ok: false, message: asServiceError(error).message }),
      );
    },
  );
};
