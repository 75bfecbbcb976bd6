/**
 * graph-gen-submit: submits a workflow (from msg.payload or the node's own setting, API or UI format, with
 * msg.inputs applied to a copy and, when set, new seeds) and sends on `msg.prompt_id`. Broken workflows are
 * refused before anything is sent. Thin: the workflow work lives in src/generation/workflow.ts and
 * ui-workflow.ts, the call in src/generation/rest-client.ts.
 */
import type { Node, NodeAPI, NodeDef, NodeMessageInFlow } from 'node-red';
import { ServiceError, invalidInput } from '../http/errors';
import type { GenerationConnection } from '../generation/connection';
import type { NodeTypeDefinition } from '../generation/workflow';
import {
  applyNewSeeds,
  applyOverrides,
  checkAgainstDefinitions,
  classTypesOf,
  looksLikeWorkflow,
  readWorkflow,
  resolveOverrides,
  seedInputsByName,
  seedInputsOf,
  validateWorkflow,
  type Workflow,
} from '../generation/workflow';
import { convertUiWorkflow, isUiWorkflow } from '../generation/ui-workflow';
import {
  asServiceError,
  handleMessages,
  generationConnection,
  showSocketTrouble,
  statusWaiting,
  statusOk,
} from './node-helpers';

interface SubmitDef extends NodeDef {
  server: string;
  workflow?: string;
  check?: boolean;
  partner?: 'auto' | 'always' | 'never';
  /** New seed each run: absent (false) on nodes saved before the setting existed, so they keep their seeds. */
  newSeed?: boolean;
}

type SubmitMessage = NodeMessageInFlow & {
  inputs?: unknown;
  partner?: unknown;
  prompt_id?: string;
  workflow?: unknown;
  seeds?: unknown;
};

/**
 * Node types of the graph editor itself: never in object_info, so asking for them would make every submit
 * re-read the definitions (a miss refreshes them once a minute). The converter handles them on its own.
 */
const EDITOR_ONLY_TYPES = new Set(['Note', 'MarkdownNote', 'Reroute', 'PrimitiveNode']);

/** The server's class types a UI-format workflow names: its nodes' `type` (the converter refuses subgraphs). */
function uiClassTypes(ui: unknown): string[] {
  const nodes = (ui as { nodes: unknown[] }).nodes;
  const types = nodes.map((node) => (node as { type?: unknown } | null)?.type);
  return [
    ...new Set(
      types.filter((type): type is string => typeof type === 'string' && !EDITOR_ONLY_TYPES.has(type)),
    ),
  ];
}

/** How long a submit waits for the shared socket, so no event of the new job is missed. */
const SOCKET_WAIT_MS = 5_000;

export = function (RED: NodeAPI) {
  function GraphGenSubmit(this: Node, def: SubmitDef) {
    RED.nodes.createNode(this, def);
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- handlers below need the node
    const node = this;
    const partnerMode = def.partner === 'always' || def.partner === 'never' ? def.partner : 'auto';
    const setting = (def.workflow ?? '').trim();
    const newSeed = def.newSeed === true;
    const status = showSocketTrouble(RED, node, def.server);
    let warnedNoPartnerKey = false;
    let warnedNoDefinitions = false;

    function templateFor(msg: SubmitMessage): unknown {
      const fromPayload = readWorkflow(msg.payload);
      if (
        fromPayload !== undefined &&
        (looksLikeWorkflow(fromPayload) || isUiWorkflow(fromPayload) || setting === '')
      )
        return fromPayload;
      if (setting !== '') {
        try {
          return JSON.parse(setting) as unknown;
        } catch (error) {
          throw invalidInput(
            `The workflow set in this node is not valid JSON (${(error as Error).message}): paste an API-format workflow`,
          );
        }
      }
      throw invalidInput(
        'No workflow: msg.payload is not a workflow (an object or JSON text) and none is set in this node',
      );
    }

    /** An API-format workflow: a UI-format one is converted with the server's node definitions. */
    async function apiWorkflow(
      raw: unknown,
      connection: GenerationConnection,
      signal: AbortSignal,
    ): Promise<Workflow> {
      if (!isUiWorkflow(raw)) return validateWorkflow(raw);
      status(statusWaiting('converting…'));
      let definitions: Record<string, NodeTypeDefinition>;
      try {
        definitions = await connection.rest.definitionsFor(uiClassTypes(raw), signal);
      } catch (error) {
        if (signal.aborted) throw error;
        const cause = asServiceError(error);
        throw new ServiceError(
          cause.code,
          `The workflow is in UI format (as the graph editor saves it), and converting it needs the server's node definitions, which could not be read: ${cause.message}. Export it in API format instead, or try again`,
          cause.cause,
        );
      }
      return validateWorkflow(convertUiWorkflow(raw, (type) => definitions[type]));
    }

    /** Says once per node that the node definitions could not be read, and what follows from that. */
    function warnNoDefinitions(error: unknown, partnerAuto: boolean): void {
      if (warnedNoDefinitions) return;
      warnedNoDefinitions = true;
      const consequences = [
        partnerAuto &&
          'partner nodes cannot be told: workflows are sent without the partner key unless msg.partner is true',
        newSeed && 'seed inputs are told by name: number inputs named seed or noise_seed get new values',
      ].filter(Boolean);
      node.warn(
        `The node definitions could not be read (${asServiceError(error).message}), so ${consequences.join('; and ')}`,
      );
    }

    async function handle(msg: SubmitMessage, signal: AbortSignal): Promise<void> {
      const connection = generationConnection(RED, def.server);
      const template = await apiWorkflow(templateFor(msg), connection, signal);
      const overrides = resolveOverrides(template, msg.inputs);
      const prompt: Workflow = validateWorkflow(applyOverrides(template, overrides));

      const partnerKey = connection.settings.partnerKey;
      let sendPartnerKey = partnerMode === 'always' || (partnerMode === 'auto' && msg.partner === true);
      const findPartnerNodes = partnerMode === 'auto' && !sendPartnerKey && Boolean(partnerKey);
      if (def.check || findPartnerNodes || newSeed) {
        status(statusWaiting('checking…'));
        let definitions: Record<string, NodeTypeDefinition> | undefined;
        try {
          definitions = await connection.rest.definitionsFor(classTypesOf(prompt), signal);
        } catch (error) {
          // Asked for to find partner nodes and seeds: without them the workflow goes as an ordinary one,
          // its seeds told by their names.
          if (def.check || signal.aborted) throw error;
          warnNoDefinitions(error, findPartnerNodes);
        }
        if (def.check) checkAgainstDefinitions(prompt, (type) => definitions?.[type]);
        if (
          findPartnerNodes &&
          Object.values(definitions ?? {}).some((definition) => definition.api_node === true)
        ) {
          sendPartnerKey = true;
        }
        if (newSeed) {
          const seeds = definitions
            ? seedInputsOf(prompt, (type) => definitions[type])
            : seedInputsByName(prompt);
          msg.seeds = applyNewSeeds(prompt, seeds, overrides);
        }
      }
      if (sendPartnerKey && !partnerKey) {
        if (partnerMode === 'always') {
          throw invalidInput(
            'This node always sends the partner key, but the config node has none: set it there',
          );
        }
        if (!warnedNoPartnerKey) {
          warnedNoPartnerKey = true;
          node.warn(
            'The workflow has partner nodes but the config node has no partner key; it is sent without one',
          );
        }
      }
      const extraData =
        sendPartnerKey && partnerKey ? { [connection.settings.partnerKeyField]: partnerKey } : undefined;

      status(statusWaiting('submitting…'));
      // Wait (bounded) for the shared socket so no event of the new job is missed; without it the job is
      // still submitted and carried by status polling.
      await connection
        .sockets()
        .ready(SOCKET_WAIT_MS)
        .catch(() => false);
      // Closed meanwhile (a redeploy): a job submitted now would belong to no flow.
      signal.throwIfAborted();
      const result = await connection.rest.submit(prompt, connection.clientId, extraData, signal);
      msg.prompt_id = result.prompt_id;
      msg.payload = result;
      msg.workflow = prompt;
      status(statusOk(`submitted ${result.prompt_id.slice(0, 8)}`));
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
