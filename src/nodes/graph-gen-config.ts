/**
 * graph-gen-config: the generation service's address and keys, and the one connection (keep-alive REST pool
 * and shared WebSocket) every generation node of this config uses. Also serves the dialog's
 * "test connection" button.
 */
import type { Node, NodeAPI, NodeDef } from 'node-red';
import type { NextFunction, Request, Response } from 'express';
import {
  DEFAULT_PARTNER_KEY_FIELD,
  GENERATION_LIMITS,
  GenerationConnection,
  type GenerationLimits,
} from '../generation/connection';
import { checkConnection } from '../generation/transfer/connection-check';
import {
  DefinitionsCache,
  connectionDefinitions,
  editorDefinitionsOf,
  type NodeDefinitions,
} from '../generation/workflows/definitions-cache';
import { convertUiWorkflow, isUiWorkflow } from '../generation/workflows/ui-workflow';
import { invalidInput, removeSecrets } from '../http/errors';
import { registerSavedWorkflowEndpoints, type DialogServer } from './saved-workflow-endpoints';
import {
  asServiceError,
  catalogTexts,
  connectionTestTarget,
  type ConnectionTestTarget,
  type Texts,
} from './node-helpers';

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
  const texts = catalogTexts(RED, 'graph-gen-config');

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

  registerDialogEndpoints(RED, texts);

  RED.httpAdmin.post(
    '/graph-gen/graph-gen-config/test',
    RED.auth.needsPermission('graph-gen-config.write'),
    (req: Request, res: Response) => {
      const target = configTarget(RED, req.body ?? {}, texts);
      if (target.refusal) {
        res.json({ ok: false, code: 'invalid_input', message: target.refusal });
        return;
      }
      checkConnection(String(target.settings.baseUrl ?? '').trim(), target.key).then(
        (result) => res.json(result),
        (error: unknown) =>
          res.json({
            ok: false,
            code: 'server_error',
            message: texts('errors.test-failed', { error: String(error) }),
          }),
      );
    },
  );
}

/** The settings and key a dialog request (test connection, definitions, conversion) names for this config node. */
function configTarget(
  RED: NodeAPI,
  body: DialogRequest,
  texts: Texts,
): ConnectionTestTarget<Partial<{ baseUrl: string }>> {
  return connectionTestTarget<{ baseUrl: string }>(RED, 'graph-gen-config', ['baseUrl'], body, texts);
}

/** What the submit dialog sends: the config node's id and its settings as the editor holds them. */
interface DialogRequest {
  id?: string;
  baseUrl?: string;
  /** Typed in this editor session; absent (or Node-RED's placeholder) = the stored key of a deployed node. */
  apiKey?: string;
  refresh?: boolean;
  workflow?: unknown;
}

/**
 * The submit dialog's endpoints: the server's node definitions (for the form), the conversion of a
 * UI-format workflow (with those definitions), and the workflows saved on the server
 * (saved-workflow-endpoints.ts). Reading a deployed node's definitions as saved needs
 * `graph-gen-config.read`; typed settings or a typed key need `graph-gen-config.write`, as "test connection"
 * does. Converting always needs `graph-gen-config.write`: it is CPU work on whatever the request carries.
 * The key never goes back: answers carry definitions, a workflow or a sentence.
 */
function registerDialogEndpoints(RED: NodeAPI, texts: Texts): void {
  const cache = new DefinitionsCache();
  /** Which settings and key a dialog's request names, worked out once per request (kept in res.locals). */
  const targetOf = (res: Response): ConnectionTestTarget<Partial<{ baseUrl: string }>> =>
    res.locals.target as ConnectionTestTarget<Partial<{ baseUrl: string }>>;
  const nameTarget = (req: Request, res: Response, next: NextFunction) => {
    res.locals.target = configTarget(RED, (req.body ?? {}) as DialogRequest, texts);
    next();
  };
  const readOrWrite = (req: Request, res: Response, next: NextFunction) => {
    RED.auth.needsPermission(`graph-gen-config.${targetOf(res).asSaved ? 'read' : 'write'}`)(req, res, next);
  };

  /** The server a dialog's settings name: a deployed node's connection when they are its settings as saved. */
  function dialogServer(
    body: DialogRequest,
    target: ConnectionTestTarget<Partial<{ baseUrl: string }>>,
  ): DialogServer {
    if (target.refusal) throw invalidInput(target.refusal);
    const baseUrl = String(target.settings.baseUrl ?? '').trim();
    if (!baseUrl) throw invalidInput(texts('errors.no-base-address'));
    const deployed = target.asSaved
      ? (RED.nodes.getNode(body.id as string) as graphGenConfig.GraphGenConfigNode | null)
      : null;
    if (deployed?.settingsError) throw invalidInput(deployed.settingsError);
    return { baseUrl, connection: deployed?.connection, key: target.key };
  }

  /**
   * The definitions the dialog's settings name, and the key they were read with (to keep it out of answers).
   * A deployed node as saved answers with what its connection holds, so the dialog and the submit nodes
   * share one copy and one limit on reads.
   */
  async function definitionsFor(
    body: DialogRequest,
    target: ConnectionTestTarget<Partial<{ baseUrl: string }>>,
  ): Promise<{ definitions: NodeDefinitions; key?: string }> {
    const { baseUrl, connection } = dialogServer(body, target);
    const refresh = body.refresh === true;
    const definitions = connection
      ? await connectionDefinitions(connection, refresh)
      : await cache.get(
          { configId: typeof body.id === 'string' ? body.id : '', baseUrl, apiKey: target.key },
          refresh,
        );
    return { definitions, key: target.key };
  }

  /**
   * Answers `{ok: true, ...}` or `{ok: false, code, message}`, never with the key in it. Only the key is
   * removed: addresses in definitions and converted workflows stay whole, as the runtime sees them.
   */
  function answer(res: Response, work: () => Promise<{ result: Record<string, unknown>; key?: string }>) {
    work().then(
      ({ result, key }) => res.json(removeSecrets({ ok: true, ...result }, [key])),
      (error: unknown) => {
        const serviceError = asServiceError(error);
        res.json({ ok: false, code: serviceError.code, message: serviceError.message });
      },
    );
  }

  RED.httpAdmin.post(
    '/graph-gen/graph-gen-config/definitions',
    nameTarget,
    readOrWrite,
    (req: Request, res: Response) => {
      const body = (req.body ?? {}) as DialogRequest;
      answer(res, async () => {
        const { definitions, key } = await definitionsFor(body, targetOf(res));
        return { result: { definitions: editorDefinitionsOf(definitions) }, key };
      });
    },
  );

  RED.httpAdmin.post(
    '/graph-gen/graph-gen-config/convert',
    RED.auth.needsPermission('graph-gen-config.write'),
    nameTarget,
    (req: Request, res: Response) => {
      const body = (req.body ?? {}) as DialogRequest;
      answer(res, async () => {
        if (!isUiWorkflow(body.workflow)) {
          throw invalidInput(texts('errors.not-ui'));
        }
        const { definitions, key } = await definitionsFor(body, targetOf(res));
        const workflow = convertUiWorkflow(body.workflow, (classType) =>
          Object.hasOwn(definitions, classType) ? definitions[classType] : undefined,
        );
        return { result: { workflow }, key };
      });
    },
  );

  registerSavedWorkflowEndpoints(RED, {
    nameTarget,
    readOrWrite,
    serverOf: (req, res) => dialogServer((req.body ?? {}) as DialogRequest, targetOf(res)),
    answer,
  });
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
