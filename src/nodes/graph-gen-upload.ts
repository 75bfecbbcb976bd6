/**
 * graph-gen-upload: uploads an image (or a mask) from a Buffer, a local file path, a data: URL, base64 text
 * or an http(s) URL, streamed. Thin: reading the payload lives in src/generation/upload-source.ts, the
 * upload itself in src/generation/rest-client.ts.
 */
import type { Node, NodeAPI, NodeDef, NodeMessageInFlow } from 'node-red';
import { invalidInput } from '../http/errors';
import { shownValue } from '../boundary/json-values';
import { numberOf } from '../boundary/outside';
import {
  DEFAULT_URL_LIMITS,
  readUploadSource,
  type PayloadSetting,
  type UrlLimits,
} from '../generation/transfer/upload-source';
import {
  catalogTexts,
  evaluateProperty,
  handleMessages,
  statusWaiting,
  statusOk,
  type Texts,
} from './node-helpers';
import { generationTarget, showTargetTrouble } from './generation-target';
import { migrateConfig } from './config-versions';

/** The settings, each present: migrateConfig (config-versions.ts) gives an older node its old defaults. */
interface UploadDef extends NodeDef {
  server: string;
  /** A graph-gen-pool node: the server is chosen per msg (then `server` is not used). */
  pool: string;
  mode: 'image' | 'mask';
  filename: string;
  filenameType: string;
  uploadType: string;
  overwrite: boolean;
  payloadIs: PayloadSetting;
  /** The largest file fetched from a URL, in MiB (blank: the default). */
  urlLimit: number | string;
  /** Seconds a URL fetch may take, all of it (blank: the default). */
  urlTimeout: number | string;
  /** Whether a URL may reach loopback, private and link-local addresses. */
  urlLocal: boolean;
}

type UploadMessage = NodeMessageInFlow & {
  /** Through a pool: the server of the msg's job or upload ({id, name}). */
  server?: unknown;
  filename?: unknown;
  type?: unknown;
  overwrite?: unknown;
  original_ref?: unknown;
};

function booleanOf(value: unknown, name: string, texts: Texts): boolean {
  if (typeof value === 'boolean') return value;
  if (value === 'true') return true;
  if (value === 'false') return false;
  throw invalidInput(texts('errors.not-boolean', { name }));
}

/**
 * msg.original_ref's subfolder and type, when given, must be text: they are sent as JSON, which an object
 * that refers to itself would break, and the service reads them as names.
 */
function checkOriginalRef(value: unknown, texts: Texts): void {
  if (value === null || typeof value !== 'object') return;
  for (const field of ['subfolder', 'type'] as const) {
    const part = (value as Record<string, unknown>)[field];
    if (part !== undefined && part !== null && typeof part !== 'string') {
      throw invalidInput(texts('errors.original-ref-not-text', { field, value: shownValue(part) }));
    }
  }
}

/** A positive number setting, or its default when unset or not a positive number. */
function positive(value: unknown, fallback: number): number {
  const number = numberOf(value);
  return number !== undefined && number > 0 ? number : fallback;
}

export = function (RED: NodeAPI) {
  const texts = catalogTexts(RED, 'graph-gen-upload');

  function GraphGenUpload(this: Node, saved: NodeDef) {
    RED.nodes.createNode(this, saved);
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- handlers below need the node
    const node = this;
    const def = migrateConfig<UploadDef>('graph-gen-upload', saved, (newer) =>
      node.warn(texts('warnings.newer-settings', newer)),
    );
    const payloadIs: PayloadSetting =
      def.payloadIs === 'path' || def.payloadIs === 'base64' ? def.payloadIs : 'auto';
    const limits: UrlLimits = {
      maxBytes: Math.round(positive(def.urlLimit, DEFAULT_URL_LIMITS.maxBytes / 2 ** 20) * 2 ** 20),
      timeoutMs: Math.round(positive(def.urlTimeout, DEFAULT_URL_LIMITS.timeoutMs / 1000) * 1000),
      allowLocal: def.urlLocal === true,
    };
    const status = showTargetTrouble(RED, node, def, texts);

    async function handle(msg: UploadMessage, signal: AbortSignal): Promise<void> {
      const target = generationTarget(RED, def, texts);
      // Through a pool: the server msg.server names, else the best one now; the submit after follows it.
      const member = target.pool ? await target.pool.memberForUpload(msg.server, signal) : undefined;
      const connection = member?.connection ?? target.connection!;
      const filenameSetting = await evaluateProperty(RED, node, msg, def.filename, def.filenameType);
      if (filenameSetting !== undefined && filenameSetting !== '' && typeof filenameSetting !== 'string') {
        throw invalidInput(texts('errors.filename-not-text'));
      }
      const type = msg.type ?? def.uploadType;
      if (type !== 'input' && type !== 'temp')
        throw invalidInput(
          texts('errors.bad-type', { type: typeof type === 'string' ? type : shownValue(type) }),
        );
      const overwrite =
        msg.overwrite !== undefined
          ? booleanOf(msg.overwrite, 'msg.overwrite', texts)
          : def.overwrite === true;
      const mask = def.mode === 'mask' || msg.original_ref !== undefined;
      if (mask) checkOriginalRef(msg.original_ref, texts);
      const source = await readUploadSource(msg.payload, payloadIs, {
        filename: (filenameSetting as string | undefined) || undefined,
        limits,
        signal,
        onFetch: () => status(statusWaiting(texts('status.fetching'))),
        proxied: (url) => connection.http.transport.proxiedForeign(url),
      });
      try {
        status(statusWaiting(texts(mask ? 'status.uploading-mask' : 'status.uploading')));
        const result = await connection.dialect.upload({
          source: source.source,
          filename: source.name,
          type,
          overwrite,
          mask,
          originalRef: msg.original_ref,
          signal,
        });
        msg.payload = result;
        msg.filename = result.name;
        if (member) msg.server = target.pool!.refOf(member);
        status(statusOk(texts('status.uploaded', { name: result.name })));
      } finally {
        await source.release();
      }
    }

    handleMessages<UploadMessage>(
      node,
      async (msg, send, signal) => {
        await handle(msg, signal);
        send(msg);
      },
      status,
    );
  }

  RED.nodes.registerType('graph-gen-upload', GraphGenUpload);
};
