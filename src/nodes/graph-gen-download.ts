/**
 * graph-gen-download: fetches output files, one msg per file, as Buffers or streamed into a directory.
 * Thin: the transfer lives in src/generation/downloads.ts and rest-client.ts.
 */
import type { Node, NodeAPI, NodeDef, NodeMessage, NodeMessageInFlow } from 'node-red';
import { invalidInput } from '../http/errors';
import {
  DEFAULT_BUFFER_LIMIT,
  downloadToBuffer,
  downloadToDirectory,
  referencesOf,
} from '../generation/transfer/downloads';
import { MIB } from '../generation/transfer/size-text';
import { catalogTexts, evaluateProperty, handleMessages, statusWaiting, statusOk } from './node-helpers';
import { generationTarget, jobConnection, showTargetTrouble } from './generation-target';
import { editorPicture } from './editor-picture';
import { migrateConfig } from './config-versions';
import { textOf } from '../boundary/outside';

/** The settings, each present: migrateConfig (config-versions.ts) gives an older node its old defaults. */
interface DownloadDef extends NodeDef {
  server: string;
  /** A graph-gen-pool node: the server is chosen per msg (then `server` is not used). */
  pool: string;
  mode: 'buffer' | 'file';
  directory: string;
  directoryType: string;
  overwrite: boolean;
  /** Buffer mode: the largest file held in memory, in MiB (blank: the default). */
  bufferLimit: number | string;
  /** Show the last image downloaded under the node in the editor (editor-picture.ts). */
  picture: boolean;
}

type DownloadMessage = NodeMessageInFlow & {
  /** Through a pool: the server of the msg's job or upload ({id, name}). */
  server?: unknown;
  directory?: unknown;
  filename?: string;
  contentType?: string;
  file?: unknown;
};

export = function (RED: NodeAPI) {
  const texts = catalogTexts(RED, 'graph-gen-download');

  function GraphGenDownload(this: Node, saved: NodeDef) {
    RED.nodes.createNode(this, saved);
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- handlers below need the node
    const node = this;
    const def = migrateConfig<DownloadDef>('graph-gen-download', saved, (newer) =>
      node.warn(texts('warnings.newer-settings', newer)),
    );
    const status = showTargetTrouble(RED, node, def, texts);
    const mode = def.mode === 'file' ? 'file' : 'buffer';
    // Blank, or not a positive number: the default.
    const limitText = (textOf(def.bufferLimit) ?? '').trim();
    const limitMiB = limitText === '' ? NaN : Number(limitText);
    const bufferLimit =
      Number.isFinite(limitMiB) && limitMiB > 0 ? Math.round(limitMiB * MIB) : DEFAULT_BUFFER_LIMIT;
    const picture = editorPicture(RED, node, def.picture === true);

    async function directoryFor(msg: DownloadMessage): Promise<string> {
      const value =
        msg.directory !== undefined && msg.directory !== ''
          ? msg.directory
          : await evaluateProperty(RED, node, msg, def.directory, def.directoryType);
      if (typeof value !== 'string' || value.trim() === '') {
        throw invalidInput(texts('errors.no-directory'));
      }
      return value.trim();
    }

    async function handle(
      msg: DownloadMessage,
      send: (msg: NodeMessage) => void,
      signal: AbortSignal,
    ): Promise<void> {
      // Through a pool: the server of the job (msg.server, else the one the pool sent msg.prompt_id to).
      const { connection } = await jobConnection(
        generationTarget(RED, def, texts),
        typeof msg.prompt_id === 'string' ? msg.prompt_id : '',
        msg.server,
      );
      const references = referencesOf(msg.payload);
      if (references.length === 0) throw invalidInput(texts('errors.no-file'));
      const directory = mode === 'file' ? await directoryFor(msg) : undefined;
      const rest = connection.dialect;
      for (const [index, ref] of references.entries()) {
        status(
          statusWaiting(
            references.length > 1
              ? texts('status.file-of', { number: index + 1, count: references.length })
              : texts('status.downloading'),
          ),
        );
        // The last file goes out on the msg itself, earlier ones on copies.
        const out = (index === references.length - 1 ? msg : RED.util.cloneMessage(msg)) as DownloadMessage;
        if (directory !== undefined) {
          const saved = await downloadToDirectory(rest, ref, directory, def.overwrite === true, signal);
          out.payload = saved.path;
          out.contentType = saved.contentType;
          // File mode reads the saved file back (only its first bytes unless it is an image, bounded).
          picture?.showFile(saved.path);
        } else {
          const file = await downloadToBuffer(rest, ref, bufferLimit, signal);
          out.payload = file.payload;
          out.contentType = file.contentType;
          picture?.showBytes(file.payload);
        }
        out.filename = ref.filename;
        out.file = ref;
        send(out);
      }
      status(
        statusOk(
          references.length === 1
            ? texts('status.downloaded')
            : texts('status.files', { count: references.length }),
        ),
      );
    }

    handleMessages<DownloadMessage>(node, handle, status);
    node.on('close', () => picture?.close());
  }

  RED.nodes.registerType('graph-gen-download', GraphGenDownload);
};
