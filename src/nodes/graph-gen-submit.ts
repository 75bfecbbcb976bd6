/**
 * graph-gen-submit: submits a workflow (from msg.payload or the node's own setting, with msg.inputs applied
 * to a copy) and sends on `msg.prompt_id`. Broken workflows are refused before anything is sent. Thin: the
 * checks live in src/generation/workflow.ts, the call in src/generation/rest-client.ts.
 */
import type { Node, NodeAPI, NodeDef, NodeMessageInFlow } from 'node-red';
import { invalidInput } from '../http/errors';
import {
  applyOverrides,
  checkAgainstDefinitions,
  classTypesOf,
  looksLikeWorkflow,
  readWorkflow,
  validateWorkflow,
  type Workflow,
} from '../generation/workflow';
import {
  asServiceError,
  handleMessages,
  generationConnection,
  statusWaiting,
  statusOk,
} from './node-helpers';

interface SubmitDef extends NodeDef {
  server: string;
  workflow?: string;
  check?: boolean;
  partner?: 'auto' | 'always' | 'never';
}

type SubmitMessage = NodeMessageInFlow & {
  inputs?: unknown;
  partner?: unknown;
  prompt_id?: string;
  workflow?: unknown;
};

/** How long a submit waits for the shared socket, so no event of the new job is missed. */
const SOCKET_WAIT_MS = 5_000;

export = function (RED: NodeAPI) {
  function GraphGenSubmit(this: Node, def: SubmitDef) {
    RED.nodes.createNode(this, def);
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- handlers below need the node
    const node = this;
    const partnerMode = def.partner === 'always' || def.partner === 'never' ? def.partner : 'auto';
    const setting = (def.workflow ?? '').trim();
    let warnedNoPartnerKey = false;
    let warnedNoDefinitions = false;

    function templateFor(msg: SubmitMessage): unknown {
      const fromPayload = readWorkflow(msg.payload);
      if (fromPayload !== undefined && (looksLikeWorkflow(fromPayload) || setting === '')) return fromPayload;
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

    async function handle(msg: SubmitMessage, signal: AbortSignal): Promise<void> {
      const connection = generationConnection(RED, def.server);
      const template = validateWorkflow(templateFor(msg));
      const prompt: Workflow = validateWorkflow(applyOverrides(template, msg.inputs));

      const partnerKey = connection.settings.partnerKey;
      let sendPartnerKey = partnerMode === 'always' || (partnerMode === 'auto' && msg.partner === true);
      if (def.check || (partnerMode === 'auto' && !sendPartnerKey && partnerKey)) {
        node.status(statusWaiting('checking…'));
        let definitions: Awaited<ReturnType<typeof connection.rest.definitionsFor>>;
        try {
          definitions = await connection.rest.definitionsFor(classTypesOf(prompt), signal);
        } catch (error) {
          // Asked for only to find partner nodes: without them the workflow goes as an ordinary one.
          if (def.check || signal.aborted) throw error;
          definitions = {};
          if (!warnedNoPartnerKey && !warnedNoDefinitions) {
            warnedNoDefinitions = true;
            node.warn(
              `The node definitions could not be read (${asServiceError(error).message}), so partner nodes cannot be told: workflows are sent without the partner key unless msg.partner is true`,
            );
          }
        }
        if (def.check) checkAgainstDefinitions(prompt, (type) => definitions[type]);
        if (
          partnerMode === 'auto' &&
          Object.values(definitions).some((definition) => definition.api_node === true)
        ) {
          sendPartnerKey = true;
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

      node.status(statusWaiting('submitting…'));
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
      node.status(statusOk(`submitted ${result.prompt_id.slice(0, 8)}`));
    }

    handleMessages<SubmitMessage>(node, async (msg, send, signal) => {
      await handle(msg, signal);
      send(msg);
    });
  }

  RED.nodes.registerType('graph-gen-submit', GraphGenSubmit);
};
