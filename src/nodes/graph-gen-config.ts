/**
 * graph-gen-config: the generation service's address and keys, and the one connection (keep-alive REST pool
 * and shared WebSocket) every generation node of this config uses. Also serves the dialog's
 * "test connection" button.
 */
import type { Node, NodeAPI, NodeDef } from 'node-red';
import type { Request, Response } from 'express';
import {
  DEFAULT_PARTNER_KEY_FIELD,
  GENERATION_LIMITS,
  GenerationConnection,
  type GenerationLimits,
} from '../generation/connection';
import { checkConnection } from '../generation/connection-check';
import { asServiceError, connectionTestTarget } from './node-helpers';

interface GraphGenConfigDef extends NodeDef {
  baseUrl: string;
  partnerKeyField?: string;
  /** Limits (blank = the default): MiB, MiB, seconds, MiB. */
  answerLimitMiB?: string | number;
  listLimitMiB?: string | number;
  requestTimeout?: string | number;
  keptEventsMiB?: string | number;
}

const MIB = 1024 * 1024;

/** A positive number setting, else the default. */
function positive(value: string | number | undefined, unit: number, fallback: number): number {
  const number = Number(value);
  return value !== undefined && String(value).trim() !== '' && Number.isFinite(number) && number > 0
    ? number * unit
    : fallback;
}

function limitsOf(def: GraphGenConfigDef): GenerationLimits {
  return {
    answerBytes: positive(def.answerLimitMiB, MIB, GENERATION_LIMITS.answerBytes),
    listBytes: positive(def.listLimitMiB, MIB, GENERATION_LIMITS.listBytes),
    requestTimeoutMs: positive(def.requestTimeout, 1000, GENERATION_LIMITS.requestTimeoutMs),
    keptEventBytes: positive(def.keptEventsMiB, MIB, GENERATION_LIMITS.keptEventBytes),
  };
}

interface GraphGenCredentials {
  apiKey?: string;
  partnerKey?: string;
}

function graphGenConfig(RED: NodeAPI): void {
  function GraphGenConfig(this: graphGenConfig.GraphGenConfigNode, def: GraphGenConfigDef): void {
    RED.nodes.createNode(this, def);
    const credentials: GraphGenCredentials = this.credentials ?? {};
    try {
      this.connection = new GenerationConnection({
        baseUrl: (def.baseUrl ?? '').trim(),
        apiKey: credentials.apiKey || undefined,
        partnerKey: credentials.partnerKey || undefined,
        partnerKeyField: (def.partnerKeyField ?? '').trim() || DEFAULT_PARTNER_KEY_FIELD,
        limits: limitsOf(def),
      });
    } catch (error) {
      // Nothing may be thrown out of a node's constructor; the nodes that use this config say why instead.
      this.settingsError = asServiceError(error).message;
      this.error(this.settingsError);
    }
    this.on('close', (_removed: boolean, done: () => void) => {
      const connection = this.connection;
      this.connection = undefined;
      if (connection) connection.close().then(done, done);
      else done();
    });
  }

  RED.nodes.registerType<graphGenConfig.GraphGenConfigNode, GraphGenConfigDef, unknown, GraphGenCredentials>(
    'graph-gen-config',
    GraphGenConfig,
    {
      credentials: { apiKey: { type: 'password' }, partnerKey: { type: 'password' } },
    },
  );

  RED.httpAdmin.post(
    '/graph-gen/graph-gen-config/test',
    RED.auth.needsPermission('graph-gen-config.write'),
    (req: Request, res: Response) => {
      const body = (req.body ?? {}) as { id?: string; baseUrl?: string; apiKey?: string };
      const target = connectionTestTarget<{ baseUrl: string }>(RED, 'graph-gen-config', ['baseUrl'], body);
      if (target.refusal) {
        res.json({ ok: false, code: 'invalid_input', message: target.refusal });
        return;
      }
      checkConnection(String(target.settings.baseUrl ?? '').trim(), target.key).then(
        (result) => res.json(result),
        (error: unknown) =>
          res.json({ ok: false, code: 'server_error', message: `The test failed: ${String(error)}` }),
      );
    },
  );
}

// The node's type lives beside the function Node-RED loads, so other node files can import it.
// eslint-disable-next-line @typescript-eslint/no-namespace
namespace graphGenConfig {
  export type GraphGenConfigNode = Node<GraphGenCredentials> & {
    /** Undefined when the settings make no connection (then `settingsError` says why). */
    connection?: GenerationConnection;
    settingsError?: string;
  };
}

export = graphGenConfig;
