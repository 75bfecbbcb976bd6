/**
 * The submit dialog's endpoints for workflows saved on the server from its own page: the list, and one by
 * name. graph-gen-config registers them beside its other dialog endpoints and lends them its rules: which
 * server a request names (a deployed config node as saved, with its stored key, needs
 * `graph-gen-config.read`; typed settings or a typed key need `graph-gen-config.write`), and answers that
 * carry a list, a workflow or a sentence, never the key. Every request is bounded: its wait, the list's
 * length and bytes, a file's bytes.
 */
import { notOffered, offersOf } from '../generation/dialects';
import type { DialectName } from '../generation/dialects/dialect';
import type { NodeAPI } from 'node-red';
import type { Request, RequestHandler, Response } from 'express';
import { GENERATION_LIMITS, type GenerationConnection } from '../generation/connection';
import { dialogClient } from '../generation/dialog-client';
import { DIALOG_DEFINITIONS, type DefinitionsSource } from '../generation/workflows/definitions-cache';
import {
  checkedWorkflowName,
  listSavedWorkflows,
  readSavedWorkflow,
} from '../generation/workflows/saved-workflows';
import type { HttpClient } from '../http/client';
import { ServiceError } from '../http/errors';

/** The server a dialog's request names, as graph-gen-config works it out. */
export interface DialogServer {
  baseUrl: string;
  /** The dialect it speaks (the deployed connection's, or the typed settings'). */
  dialect: DialectName;
  /** A deployed config node's connection, when the request names it as saved. */
  connection?: GenerationConnection;
  /** Where and how to reach it when there is no connection (typed settings: credential, TLS, proxy). */
  source: Pick<DefinitionsSource, 'baseUrl' | 'apiKey' | 'auth' | 'transport'>;
  /** The secrets the request may use (typed, or the deployed node's stored ones): kept out of answers. */
  secrets: Array<string | undefined>;
}

/** What graph-gen-config lends: its middleware, how it names the server, and how it answers. */
export interface DialogEndpointRules {
  /** Works out which settings and key the request names (before `readOrWrite`). */
  nameTarget: RequestHandler;
  /** Asks for `graph-gen-config.read` or `.write`, as the named settings need. */
  readOrWrite: RequestHandler;
  /** The server the request names; raises invalid_input with a sentence when it names none. */
  serverOf: (req: Request, res: Response) => DialogServer;
  /** Answers `{ok: true, ...result}` without the key, or `{ok: false, code, message}`. */
  answer: (
    res: Response,
    work: () => Promise<{ result: Record<string, unknown>; secrets: Array<string | undefined> }>,
  ) => void;
}

interface SavedWorkflowRequest {
  name?: unknown;
}

/**
 * Runs `work` against the server a request names: a deployed node's connection (its pool, its answer limit)
 * or a client of its own for typed settings, closed afterwards. A server that does not answer within the
 * dialog's wait gets a sentence.
 */
async function withServer<T>(
  server: DialogServer,
  work: (http: HttpClient, maxBytes: number, signal: AbortSignal) => Promise<T>,
): Promise<T> {
  if (!offersOf(server.dialect).savedWorkflows) throw notOffered(server.dialect, 'savedWorkflows');
  const signal = AbortSignal.timeout(DIALOG_DEFINITIONS.waitMs);
  const own = server.connection ? undefined : dialogClient(server.source);
  const http = server.connection?.http ?? own!.http;
  const maxBytes = server.connection?.limits.answerBytes ?? GENERATION_LIMITS.answerBytes;
  try {
    return await work(http, maxBytes, signal);
  } catch (error) {
    if (!signal.aborted) throw error;
    const host = own?.host ?? new URL(server.baseUrl).host;
    throw new ServiceError(
      'network',
      `${host} did not answer within ${Math.round(DIALOG_DEFINITIONS.waitMs / 1000)} s: check that the service is running, then try again.`,
    );
  } finally {
    await own?.http.close();
  }
}

/**
 * `POST /graph-gen/graph-gen-config/saved-workflows` `{id, baseUrl, apiKey?}` answers
 * `{ok: true, workflows: [{name, size?, modified?}], leftOut}`; `POST /graph-gen/graph-gen-config/saved-workflow`
 * `{id, baseUrl, apiKey?, name}` answers `{ok: true, name, workflow}` (the file as saved, UI format).
 */
export function registerSavedWorkflowEndpoints(RED: NodeAPI, rules: DialogEndpointRules): void {
  RED.httpAdmin.post(
    '/graph-gen/graph-gen-config/saved-workflows',
    rules.nameTarget,
    rules.readOrWrite,
    (req: Request, res: Response) => {
      rules.answer(res, async () => {
        const server = rules.serverOf(req, res);
        const list = await withServer(server, (http, _maxBytes, signal) => listSavedWorkflows(http, signal));
        return { result: { workflows: list.workflows, leftOut: list.leftOut }, secrets: server.secrets };
      });
    },
  );

  RED.httpAdmin.post(
    '/graph-gen/graph-gen-config/saved-workflow',
    rules.nameTarget,
    rules.readOrWrite,
    (req: Request, res: Response) => {
      rules.answer(res, async () => {
        const name = checkedWorkflowName(
          (req.body as SavedWorkflowRequest | undefined)?.name,
          'The name of the saved workflow',
        );
        const server = rules.serverOf(req, res);
        const workflow = await withServer(server, (http, maxBytes, signal) =>
          readSavedWorkflow(http, name, { signal, maxBytes }),
        );
        return { result: { name, workflow }, secrets: server.secrets };
      });
    },
  );
}
