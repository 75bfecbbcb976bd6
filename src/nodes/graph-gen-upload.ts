/**
 * graph-gen-upload: uploads an image (or a mask) from a Buffer or a local file path, streamed. Thin: the
 * upload itself lives in src/generation/rest-client.ts.
 */
import type { Node, NodeAPI, NodeDef, NodeMessageInFlow } from 'node-red';
import { invalidInput } from '../http/errors';
import {
  evaluateProperty,
  handleMessages,
  generationConnection,
  statusWaiting,
  statusOk,
} from './node-helpers';

interface UploadDef extends NodeDef {
  server: string;
  mode?: 'image' | 'mask';
  filename?: string;
  filenameType?: string;
  uploadType?: string;
  overwrite?: boolean;
}

type UploadMessage = NodeMessageInFlow & {
  filename?: unknown;
  type?: unknown;
  overwrite?: unknown;
  original_ref?: unknown;
};

function booleanOf(value: unknown, name: string): boolean {
  if (typeof value === 'boolean') return value;
  if (value === 'true') return true;
  if (value === 'false') return false;
  throw invalidInput(`${name} must be true or false`);
}

export = function (RED: NodeAPI) {
  function GraphGenUpload(this: Node, def: UploadDef) {
    RED.nodes.createNode(this, def);
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- handlers below need the node
    const node = this;

    async function handle(msg: UploadMessage, signal: AbortSignal): Promise<void> {
      const connection = generationConnection(RED, def.server);
      const filenameSetting = await evaluateProperty(
        RED,
        node,
        msg,
        def.filename ?? 'filename',
        def.filenameType || 'msg',
      );
      if (filenameSetting !== undefined && filenameSetting !== '' && typeof filenameSetting !== 'string') {
        throw invalidInput('the file name to store must be text (msg.filename)');
      }
      const type = msg.type ?? (def.uploadType || 'input');
      if (type !== 'input' && type !== 'temp')
        throw invalidInput(`msg.type must be "input" or "temp", not "${String(type)}"`);
      const overwrite =
        msg.overwrite !== undefined ? booleanOf(msg.overwrite, 'msg.overwrite') : def.overwrite !== false;
      const mask = def.mode === 'mask' || msg.original_ref !== undefined;
      if (!Buffer.isBuffer(msg.payload) && typeof msg.payload !== 'string') {
        throw invalidInput(
          'msg.payload must be a Buffer (the file) or a string (a local file path) to upload',
        );
      }
      node.status(statusWaiting(mask ? 'uploading mask…' : 'uploading…'));
      const result = await connection.rest.upload({
        source: msg.payload,
        filename: (filenameSetting as string | undefined) || undefined,
        type,
        overwrite,
        mask,
        originalRef: msg.original_ref,
        signal,
      });
      msg.payload = result;
      msg.filename = result.name;
      node.status(statusOk(`uploaded ${result.name}`));
    }

    handleMessages<UploadMessage>(node, async (msg, send, signal) => {
      await handle(msg, signal);
      send(msg);
    });
  }

  RED.nodes.registerType('graph-gen-upload', GraphGenUpload);
};
