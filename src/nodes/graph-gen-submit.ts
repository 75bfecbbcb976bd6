/**
 * graph-gen-submit: submits a workflow (from msg.payload, the node's own setting, or a workflow saved on the
 * server read by name for each msg; API or UI format, with msg.inputs applied to a copy and, when set, new
 * seeds) and sends on `msg.prompt_id`. Broken workflows are refused before anything is sent. Thin: the
 * workflow work lives in src/generation/workflows/ (workflow.ts, ui-workflow.ts, saved-workflows.ts), the
 * call in src/generation/transfer/rest-client.ts.
 */
import type { Node, NodeAPI, NodeDef, NodeMessageInFlow } from 'node-red';
import { ServiceError, invalidInput } from '../http/errors';
import { jsonProblemOf } from '../boundary/json-values';
import { ownValue, textOf } from '../boundary/outside';
import { migrateConfig } from './config-versions';
import type { GenerationConnection } from '../generation/connection';
import type { SubmitResult } from '../generation/transfer/rest-client';
import type { NodeTypeDefinition } from '../generation/workflows/workflow';
import {
  applyNewSeeds,
  applyResolvedOverrides,
  checkAgainstDefinitions,
  classTypesOf,
  looksLikeWorkflow,
  readWorkflow,
  resolveOverrides,
  seedInputsByName,
  seedInputsOf,
  validateWorkflow,
  type Workflow,
} from '../generation/workflows/workflow';
import { convertUiWorkflow, isUiWorkflow, uiClassTypes } from '../generation/workflows/ui-workflow';
import { checkedWorkflowName, readSavedWorkflow } from '../generation/workflows/saved-workflows';
import { needsOf, type WorkflowNeeds } from '../generation/pool/needs';
import { asServiceError, catalogTexts, handleMessages, statusWaiting, statusOk } from './node-helpers';
import { generationTarget, showTargetTrouble } from './generation-target';

/** The settings, each present: migrateConfig (config-versions.ts) gives an older node its old defaults. */
interface SubmitDef extends NodeDef {
  server: string;
  /** A graph-gen-pool node: the job goes to one of its servers (then `server` is not used). */
  pool: string;
  workflow: string;
  /** A workflow saved on the server, read by name for each msg; '' for none. */
  savedWorkflow: string;
  check: boolean;
  partner: 'auto' | 'always' | 'never';
  /** New seed each run (a node saved before the setting keeps its seeds). */
  newSeed: boolean;
}

type SubmitMessage = NodeMessageInFlow & {
  inputs?: unknown;
  partner?: unknown;
  prompt_id?: string;
  workflow?: unknown;
  seeds?: unknown;
  server?: unknown;
};

/** The server read from before the job has one (saved workflows, node definitions), for what the job needs. */
type Reader = (needs?: WorkflowNeeds) => Promise<GenerationConnection>;

/** How long a submit waits for the shared socket, so no event of the new job is missed. */
const SOCKET_WAIT_MS = 5_000;

export = function (RED: NodeAPI) {
  const texts = catalogTexts(RED, 'graph-gen-submit');

  function GraphGenSubmit(this: Node, saved: NodeDef) {
    RED.nodes.createNode(this, saved);
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- handlers below need the node
    const node = this;
    const def = migrateConfig<SubmitDef>('graph-gen-submit', saved, (newer) =>
      node.warn(texts('warnings.newer-settings', newer)),
    );
    const partnerMode = def.partner === 'always' || def.partner === 'never' ? def.partner : 'auto';
    // Text of any length (a workflow is long); what is not text is none.
    const setting = (textOf(def.workflow, Infinity) ?? '').trim();
    const savedName = (textOf(def.savedWorkflow, Infinity) ?? '').trim();
    const newSeed = def.newSeed === true;
    const status = showTargetTrouble(RED, node, def, texts);
    let warnedNoPartnerKey = false;
    let warnedNoDefinitions = false;

    /**
     * The workflow of this msg: msg.payload when it is one, else the saved workflow this node names (read for
     * each msg: it may have changed on the server since the last), else the node's own.
     */
    async function templateFor(msg: SubmitMessage, reader: Reader, signal: AbortSignal): Promise<unknown> {
      const fromPayload = readWorkflow(msg.payload);
      if (
        fromPayload !== undefined &&
        (looksLikeWorkflow(fromPayload) || isUiWorkflow(fromPayload) || (setting === '' && savedName === ''))
      )
        return fromPayload;
      if (savedName !== '') {
        const name = checkedWorkflowName(savedName, texts('errors.saved-setting'));
        status(statusWaiting(texts('status.reading')));
        const connection = await reader();
        return readSavedWorkflow(connection.savedWorkflowsClient(), name, {
          signal,
          maxBytes: connection.limits.answerBytes,
        });
      }
      if (setting !== '') {
        try {
          return JSON.parse(setting) as unknown;
        } catch (error) {
          throw invalidInput(texts('errors.bad-json', { error: (error as Error).message }));
        }
      }
      throw invalidInput(texts('errors.no-workflow'));
    }

    /** An API-format workflow: a UI-format one is converted with the server's node definitions. */
    async function apiWorkflow(raw: unknown, reader: Reader, signal: AbortSignal): Promise<Workflow> {
      if (!isUiWorkflow(raw)) return validateWorkflow(raw);
      status(statusWaiting(texts('status.converting')));
      let definitions: Record<string, NodeTypeDefinition>;
      try {
        const classTypes = uiClassTypes(raw);
        const connection = await reader({ classTypes, models: [] });
        definitions = await connection.definitions().definitionsFor(classTypes, signal);
      } catch (error) {
        if (signal.aborted) throw error;
        const cause = asServiceError(error);
        throw new ServiceError(
          cause.code,
          texts('errors.ui-no-definitions', { message: cause.message }),
          cause.cause,
        );
      }
      return validateWorkflow(convertUiWorkflow(raw, (type) => ownValue(definitions, type)));
    }

    /** Says once per node that the node definitions could not be read, and what follows from that. */
    function warnNoDefinitions(error: unknown, partnerAuto: boolean): void {
      if (warnedNoDefinitions) return;
      warnedNoDefinitions = true;
      const consequences = [
        partnerAuto && texts('warnings.partner-untold'),
        newSeed && texts('warnings.seeds-by-name'),
      ].filter(Boolean);
      node.warn(
        texts('warnings.no-definitions', {
          error: asServiceError(error).message,
          consequences: consequences.join(texts('warnings.and')),
        }),
      );
    }

    async function handle(msg: SubmitMessage, signal: AbortSignal): Promise<void> {
      const target = generationTarget(RED, def, texts);
      const { pool } = target;
      // Through a pool: the server msg.server names (an upload went there), else the one the job would go to now.
      const pinned = pool?.pinnedBy(msg.server);
      const reader: Reader = async (needs) =>
        target.connection ??
        pinned?.connection ??
        (await pool!.order(needs, undefined, signal))[0].connection;
      const template = await apiWorkflow(await templateFor(msg, reader, signal), reader, signal);
      const overrides = resolveOverrides(template, msg.inputs);
      const prompt: Workflow = validateWorkflow(applyResolvedOverrides(template, overrides));
      // A workflow that refers to itself (or holds a BigInt) would fail only when it is written as JSON.
      const unsendable = jsonProblemOf(prompt);
      if (unsendable) {
        throw invalidInput(
          texts('errors.not-json', { where: unsendable.path || 'it', problem: unsendable.problem }),
        );
      }

      const connection = await reader(needsOf(prompt));
      const partnerKey = connection.settings.partnerKey;
      let sendPartnerKey = partnerMode === 'always' || (partnerMode === 'auto' && msg.partner === true);
      const findPartnerNodes = partnerMode === 'auto' && !sendPartnerKey && Boolean(partnerKey);
      if (def.check || findPartnerNodes || newSeed) {
        status(statusWaiting(texts('status.checking')));
        let definitions: Record<string, NodeTypeDefinition> | undefined;
        try {
          definitions = await connection.definitions().definitionsFor(classTypesOf(prompt), signal);
        } catch (error) {
          // Asked for to find partner nodes and seeds: without them the workflow goes as an ordinary one,
          // its seeds told by their names.
          if (def.check || signal.aborted) throw error;
          warnNoDefinitions(error, findPartnerNodes);
        }
        if (def.check)
          checkAgainstDefinitions(prompt, (type) => (definitions ? ownValue(definitions, type) : undefined));
        if (
          findPartnerNodes &&
          Object.values(definitions ?? {}).some((definition) => definition.api_node === true)
        ) {
          sendPartnerKey = true;
        }
        if (newSeed) {
          const seeds = definitions
            ? seedInputsOf(prompt, (type) => ownValue(definitions, type))
            : seedInputsByName(prompt);
          msg.seeds = applyNewSeeds(prompt, seeds, overrides);
        }
      }
      if (sendPartnerKey && !partnerKey) {
        if (partnerMode === 'always') {
          throw invalidInput(texts('errors.no-partner-key'));
        }
        if (!warnedNoPartnerKey) {
          warnedNoPartnerKey = true;
          node.warn(texts('warnings.no-partner-key'));
        }
      }
      status(statusWaiting(texts('status.submitting')));
      if (pool) {
        // The pool waits for the chosen server's socket, and sends each server its own partner key.
        const { result, member } = await pool.submit(
          prompt,
          { partner: sendPartnerKey, server: msg.server },
          signal,
        );
        sent(msg, result, prompt);
        msg.server = pool.refOf(member);
        return;
      }
      // Wait (bounded) for the shared socket so no event of the new job is missed; without it the job is
      // still submitted and carried by status polling.
      await connection
        .sockets()
        .ready(SOCKET_WAIT_MS)
        .catch(() => false);
      // Closed meanwhile (a redeploy): a job submitted now would belong to no flow.
      signal.throwIfAborted();
      const result = await connection.submit(prompt, connection.partnerExtra(sendPartnerKey), signal);
      sent(msg, result, prompt);
    }

    function sent(msg: SubmitMessage, result: SubmitResult, prompt: Workflow): void {
      msg.prompt_id = result.prompt_id;
      msg.payload = result;
      msg.workflow = prompt;
      status(statusOk(texts('status.submitted', { id: result.prompt_id.slice(0, 8) })));
    }

    handleMessages<SubmitMessage>(
      node,
      async (msg, send, signal) => {
        await handle(msg, signal);
        send(msg);
      },
      status,
    );
  }

  RED.nodes.registerType('graph-gen-submit', GraphGenSubmit);
};
