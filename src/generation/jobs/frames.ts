/**
 * The generation service's binary WebSocket frames (spec: "Binary frames"): a big-endian 4-byte type, then
 * a type-specific body. Parsing never throws: a frame that is short, truncated, oversized or of an unknown
 * type comes back as a rejection with a reason, so one bad frame cannot take the socket down. A preview's
 * metadata is read at the boundary (readJsonText: a nesting bound), its fields only as its own.
 */
import { ownValue, readJsonText } from '../../boundary/outside';
import { isRecord } from '../../boundary/json-values';

export const BinaryType = {
  PREVIEW_IMAGE: 1,
  TEXT: 3,
  PREVIEW_IMAGE_WITH_METADATA: 4,
} as const;

export type ImageType = 'jpeg' | 'png';

export interface PreviewMetadata {
  node_id?: string;
  display_node_id?: string;
  real_node_id?: string;
  prompt_id?: string;
  parent_node_id?: string | null;
  [field: string]: unknown;
}

export type BinaryFrame =
  | { type: typeof BinaryType.PREVIEW_IMAGE; imageType: ImageType; image: Buffer }
  | { type: typeof BinaryType.TEXT; nodeId: string; text: string }
  | {
      type: typeof BinaryType.PREVIEW_IMAGE_WITH_METADATA;
      imageType: ImageType;
      image: Buffer;
      metadata: PreviewMetadata;
    };

export type ParsedFrame =
  { ok: true; frame: BinaryFrame } | { ok: false; reason: string; unknownType?: number };

/** Larger frames are refused: previews are small, and a runaway frame must not be buffered per job. */
export const DEFAULT_MAX_FRAME_BYTES = 32 * 1024 * 1024;
/** A metadata block larger than this is not metadata. */
const MAX_METADATA_BYTES = 64 * 1024;
const MAX_NODE_ID_BYTES = 4 * 1024;

const IMAGE_TYPE_CODES = new Map<number, ImageType>([
  [1, 'jpeg'],
  [2, 'png'],
]);

function rejected(reason: string, unknownType?: number): ParsedFrame {
  return unknownType === undefined ? { ok: false, reason } : { ok: false, reason, unknownType };
}

/** Recognises JPEG and PNG by their first bytes (type-4 frames do not say which they carry). */
export function sniffImageType(image: Buffer): ImageType | undefined {
  if (image.length >= 3 && image[0] === 0xff && image[1] === 0xd8 && image[2] === 0xff) return 'jpeg';
  if (image.length >= 4 && image.readUInt32BE(0) === 0x89504e47) return 'png';
  return undefined;
}

function imageTypeFromMetadata(metadata: PreviewMetadata): ImageType | undefined {
  const declared = ownValue(metadata, 'image_type');
  if (typeof declared !== 'string') return undefined;
  if (/png/i.test(declared)) return 'png';
  if (/jpe?g/i.test(declared)) return 'jpeg';
  return undefined;
}

export function parseBinaryFrame(data: Buffer, maxBytes = DEFAULT_MAX_FRAME_BYTES): ParsedFrame {
  if (data.length > maxBytes) return rejected(`oversized frame (${data.length} bytes)`);
  if (data.length < 8) return rejected(`short frame (${data.length} bytes)`);
  const type = data.readUInt32BE(0);
  const word = data.readUInt32BE(4);
  // Read in place: `data` is sliced only for the image a frame carries (one Buffer per preview).
  const restLength = data.length - 8;
  switch (type) {
    case BinaryType.PREVIEW_IMAGE: {
      const imageType = IMAGE_TYPE_CODES.get(word);
      if (!imageType) return rejected(`preview with unknown image type ${word}`);
      if (restLength === 0) return rejected('preview without image bytes');
      return { ok: true, frame: { type, imageType, image: data.subarray(8) } };
    }
    case BinaryType.TEXT: {
      if (word > MAX_NODE_ID_BYTES || word > restLength)
        return rejected(`text frame with node id length ${word} beyond its ${restLength} bytes`);
      const nodeId = data.toString('utf8', 8, 8 + word);
      const text = data.toString('utf8', 8 + word);
      return { ok: true, frame: { type, nodeId, text } };
    }
    case BinaryType.PREVIEW_IMAGE_WITH_METADATA: {
      if (word > MAX_METADATA_BYTES || word > restLength)
        return rejected(`preview with metadata length ${word} beyond its ${restLength} bytes`);
      const read = readJsonText(data.toString('utf8', 8, 8 + word));
      if (!read.ok) return rejected(`preview whose metadata cannot be read: ${read.reason}`);
      if (!isRecord(read.value)) return rejected('preview whose metadata is not an object');
      if (restLength === word) return rejected('preview without image bytes');
      const image = data.subarray(8 + word);
      const meta: PreviewMetadata = read.value;
      const imageType = imageTypeFromMetadata(meta) ?? sniffImageType(image) ?? 'png';
      return { ok: true, frame: { type, imageType, image, metadata: meta } };
    }
    default:
      return rejected(`unknown binary frame type ${type}`, type);
  }
}

/** Frame builders: the sandbox and the benchmarks send what the parser reads. */
export function encodePreview(imageType: ImageType, image: Buffer): Buffer {
  const header = Buffer.alloc(8);
  header.writeUInt32BE(BinaryType.PREVIEW_IMAGE, 0);
  header.writeUInt32BE(imageType === 'jpeg' ? 1 : 2, 4);
  return Buffer.concat([header, image]);
}

export function encodeText(nodeId: string, text: string): Buffer {
  const id = Buffer.from(nodeId, 'utf8');
  const header = Buffer.alloc(8);
  header.writeUInt32BE(BinaryType.TEXT, 0);
  header.writeUInt32BE(id.length, 4);
  return Buffer.concat([header, id, Buffer.from(text, 'utf8')]);
}

export function encodePreviewWithMetadata(metadata: PreviewMetadata, image: Buffer): Buffer {
  const meta = Buffer.from(JSON.stringify(metadata), 'utf8');
  const header = Buffer.alloc(8);
  header.writeUInt32BE(BinaryType.PREVIEW_IMAGE_WITH_METADATA, 0);
  header.writeUInt32BE(meta.length, 4);
  return Buffer.concat([header, meta, image]);
}
