/**
 * A v2 job's outputs (assets) as today's outputs: `{node_id: {images: [{filename, subfolder, type, asset_id}]}}`,
 * so a flow reads msg.outputs and msg.files alike whichever dialect its config node speaks, and the download
 * node fetches a file by its `asset_id` on v2. The one place that maps v2 output kinds onto today's keys.
 */
import type { JobOutputs } from '../../jobs/job-outputs';
import { mergeOutput } from '../../jobs/job-outputs';

/** One item of a v2 job's `outputs` (or an SSE `output` event), read at the boundary. */
export interface V2OutputItem {
  /** The asset id: what `/api/v2/assets/{id}/content` downloads. */
  id: string;
  node_id: string;
  /** The file's name (what today's API calls `filename`). */
  name: string;
  /** image, video, audio, text, latent (or a kind this package does not know). */
  type: string;
  content_type?: string;
}

/** v2 kinds onto the output keys of today's API (ComfyUI's history: images, gifs, audio, text, latents). */
const KEY_OF_KIND = new Map<string, string>([
  ['image', 'images'],
  ['video', 'gifs'],
  ['audio', 'audio'],
  ['text', 'text'],
  ['latent', 'latents'],
]);

/** The output key of a v2 kind; a kind not known keeps its own name (never a prototype's member). */
export function outputKeyOf(kind: string): string {
  return KEY_OF_KIND.get(kind) ?? kind;
}

/** One v2 output as today's file reference (type `output`: v2 lists only what the job kept). */
export function fileOfOutput(item: V2OutputItem): Record<string, unknown> {
  const file: Record<string, unknown> = {
    filename: item.name,
    subfolder: '',
    type: 'output',
    asset_id: item.id,
  };
  if (item.content_type) file.content_type = item.content_type;
  return file;
}

/** Adds one v2 output to today's outputs shape (arrays appended, as for a node reported twice). */
export function addOutput(outputs: JobOutputs, item: V2OutputItem): void {
  mergeOutput(outputs, item.node_id, { [outputKeyOf(item.type)]: [fileOfOutput(item)] });
}

/** A v2 job's outputs list as today's outputs. */
export function outputsOf(items: readonly V2OutputItem[]): JobOutputs {
  const outputs: JobOutputs = {};
  for (const item of items) addOutput(outputs, item);
  return outputs;
}
