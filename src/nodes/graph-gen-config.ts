/**
 * graph-gen-config: the generation service's address, how its requests prove who sends them (API key, bearer
 * token, basic, a header of the user's naming), TLS (a core tls-config node) and proxy (a core http proxy node,
 * else the environment's), and the one connection (keep-alive REST pool and shared WebSocket) every
 * generation node of this config uses (its settings read as graph-gen-config-settings.ts says). Also serves the
 * dialogs' endpoints: "test connection", the server's node definitions and a UI workflow's conversion.
 */
import type { NodeAPI, NodeDef } from 'node-red';
import type { NextFunction, Request, Response } from 'express';
import { DEFAULT_PARTNER_KEY_FIELD, GenerationConnection } from '../generation/connection';
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
import { forgetClientId, keptClientId } from './node-state';
import type { TransportSettings } from '../http/transport';
import {
  asServiceError,
  catalogTexts,
  connectionTestTarget,
  type ConnectionTestTarget,
  type Texts,
} from './node-helpers';
import { notOffered, offersOf } from '../generation/dialects';
import { errorText, textOf } from '../boundary/outside';
import { migrateConfig } from './config-versions';
import type { GraphGenConfigNode as ConfigNode, GraphGenCredentials } from './graph-gen-config-node';
import {
  ACCESS_FIELDS,
  CREDENTIAL_KINDS,
  authOf,
  dialectOf,
  limitsOf,
  transportOf,
  type AccessSettings,
  type GraphGenConfigDef,
} from './graph-gen-config-settings';

function graphGenConfig(RED: NodeAPI): void {
  const texts = catalogTexts(RED, 'graph-gen-config');

  function GraphGenConfig(this: graphGenConfig.GraphGenConfigNode, saved: NodeDef): void {
    RED.nodes.createNode(this, saved);
    const def = migrateConfig<GraphGenConfigDef>('graph-gen-config', saved, (newer) =>
      this.warn(texts('warnings.newer-settings', newer)),
    );
    const credentials: GraphGenCredentials = this.credentials ?? {};
    try {
      const transport = transportOf(RED, def, texts);
      this.connection = new GenerationConnection({
        baseUrl: (textOf(def.baseUrl) ?? '').trim(),
        dialect: dialectOf(def),
        ...authOf(def, credentials),
        partnerKey: credentials.partnerKey || undefined,
        // Blank: the default field.
        partnerKeyField: (textOf(def.partnerKeyField) ?? '').trim() || DEFAULT_PARTNER_KEY_FIELD,
        limits: limitsOf(def),
        ...(transport ? { transport } : {}),
        clientId: keptClientId(RED, this.id),
      });
    } catch (error) {
      // Nothing may be thrown out of a node's constructor; the nodes that use this config say why instead.
      this.settingsError = asServiceError(error).message;
      this.error(this.settingsError);
    }
    this.on('close', (removed: boolean, done: () => void) => {
      const connection = this.connection;
      this.connection = undefined;
      if (removed) forgetClientId(RED, this.id);
      if (connection) connection.close().then(done, done);
      else done();
    });
  }

  RED.nodes.registerType<graphGenConfig.GraphGenConfigNode, NodeDef, unknown, GraphGenCredentials>(
    'graph-gen-config',
    GraphGenConfig,
    {
      credentials: {
        apiKey: { type: 'password' },
        partnerKey: { type: 'password' },
        username: { type: 'text' },
        password: { type: 'password' },
      },
    },
  );

  registerDialogEndpoints(RED, texts);

  RED.httpAdmin.post(
    '/graph-gen/graph-gen-config/test',
    RED.auth.needsPermission('graph-gen-config.write'),
    (req: Request, res: Response) => {
      const target = configTarget(RED, req.body ?? {}, texts);
      let transport: TransportSettings | undefined;
      try {
        if (target.refusal) throw invalidInput(target.refusal);
        transport = transportOf(RED, target.settings, texts);
      } catch (error) {
        res.json({ ok: false, code: 'invalid_input', message: asServiceError(error).message });
        return;
      }
      checkConnection({
        baseUrl: (textOf(target.settings.baseUrl) ?? '').trim(),
        dialect: dialectOf(target.settings),
        ...authOf(target.settings, target.credentials),
        transport,
      }).then(
        (result) => res.json(result),
        (error: unknown) =>
          res.json({
            ok: false,
            code: 'server_error',
            message: texts('errors.test-failed', { error: errorText(error) }),
          }),
      );
    },
  );
}

/** The settings a dialog names: the address and how it is reached. */
type DialogSettings = { baseUrl: string } & AccessSettings;
type DialogTarget = ConnectionTestTarget<Partial<DialogSettings>>;

/**
 * The settings and credentials a dialog request (test connection, definitions, conversion) names for this
 * config node.
 */
function configTarget(RED: NodeAPI, body: DialogRequest, texts: Texts): DialogTarget {
  return connectionTestTarget<DialogSettings>(
    RED,
    'graph-gen-config',
    ['baseUrl', ...ACCESS_FIELDS],
    body,
    texts,
    { credentials: CREDENTIAL_KINDS },
  );
}

/** What the dialogs send: the config node's id and its settings as the editor holds them. */
interface DialogRequest extends AccessSettings {
  id?: string;
  baseUrl?: string;
  /** Typed in this editor session; absent (or Node-RED's placeholder) = the stored key of a deployed node. */
  apiKey?: string;
  username?: string;
  password?: string;
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
  const targetOf = (res: Response): DialogTarget => res.locals.target as DialogTarget;
  const nameTarget = (req: Request, res: Response, next: NextFunction) => {
    res.locals.target = configTarget(RED, (req.body ?? {}) as DialogRequest, texts);
    next();
  };
  const readOrWrite = (req: Request, res: Response, next: NextFunction) => {
    RED.auth.needsPermission(`graph-gen-config.${targetOf(res).asSaved ? 'read' : 'write'}`)(req, res, next);
  };

  /**
   * The server a dialog's settings name: a deployed node's connection when they are its settings as saved, else
   * where and how to reach the typed settings (their credential, TLS and proxy), and the secrets to keep out of
   * answers (the user name is no secret, and may be a common word found in definitions).
   */
  function dialogServer(body: DialogRequest, target: DialogTarget): DialogServer {
    if (target.refusal) throw invalidInput(target.refusal);
    const baseUrl = (textOf(target.settings.baseUrl) ?? '').trim();
    if (!baseUrl) throw invalidInput(texts('errors.no-base-address'));
    const deployed = target.asSaved
      ? (RED.nodes.getNode(body.id as string) as graphGenConfig.GraphGenConfigNode | null)
      : null;
    if (deployed?.settingsError) throw invalidInput(deployed.settingsError);
    return {
      baseUrl,
      dialect: deployed?.connection?.dialect.name ?? dialectOf(target.settings),
      connection: deployed?.connection,
      source: deployed?.connection
        ? { baseUrl }
        : {
            baseUrl,
            ...authOf(target.settings, target.credentials),
            transport: transportOf(RED, target.settings, texts),
          },
      secrets: [target.key, target.credentials.password],
    };
  }

  /**
   * The definitions the dialog's settings name, and the secrets they were read with (to keep out of answers).
   * A deployed node as saved answers with what its connection holds, so the dialog and the submit nodes
   * share one copy and one limit on reads.
   */
  async function definitionsFor(
    body: DialogRequest,
    target: DialogTarget,
  ): Promise<{ definitions: NodeDefinitions; secrets: Array<string | undefined> }> {
    const { connection, source, secrets } = dialogServer(body, target);
    // Settings typed for a dialect without node definitions (Comfy API v2): nothing to ask (a deployed node's
    // connection says the same through its dialect).
    const dialect = dialectOf(target.settings);
    if (!connection && !offersOf(dialect).nodeDefinitions) throw notOffered(dialect, 'nodeDefinitions');
    const refresh = body.refresh === true;
    const definitions = connection
      ? await connectionDefinitions(connection, refresh)
      : await cache.get({ configId: typeof body.id === 'string' ? body.id : '', ...source }, refresh);
    return { definitions, secrets };
  }

  /**
   * Answers `{ok: true, ...}` or `{ok: false, code, message}`, never with a secret in it. Only the secrets
   * are removed: addresses in definitions and converted workflows stay whole, as the runtime sees them.
   */
  function answer(
    res: Response,
    work: () => Promise<{ result: Record<string, unknown>; secrets: Array<string | undefined> }>,
  ) {
    work().then(
      ({ result, secrets }) => res.json(removeSecrets({ ok: true, ...result }, secrets)),
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
        const { definitions, secrets } = await definitionsFor(body, targetOf(res));
        return { result: { definitions: editorDefinitionsOf(definitions) }, secrets };
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
        const { definitions, secrets } = await definitionsFor(body, targetOf(res));
        const workflow = convertUiWorkflow(body.workflow, (classType) =>
          Object.hasOwn(definitions, classType) ? definitions[classType] : undefined,
        );
        return { result: { workflow }, secrets };
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

// The node's type, beside the function Node-RED loads, so other node files can import it from either.
// eslint-disable-next-line @typescript-eslint/no-namespace
namespace graphGenConfig {
  export type GraphGenConfigNode = ConfigNode;
}

export = graphGenConfig;
