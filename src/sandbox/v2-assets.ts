/**
 * The v2 mode's assets, as the proxy keeps them (comfy-api-proxy app.py and assets.py, measured in
 * peers/comfy-v2/README.md): uploads (`POST /api/v2/assets`, multipart, BLAKE3-deduplicated, stored as the
 * engine's input files), the hash index (`HEAD .../by-hash/{hash}`, `POST .../from-hash`), asset records and
 * their content with byte ranges, deletes, and the files a job's output ids name (v2-output-ids.ts). Also
 * resolves the `core/ASSET` references of a submitted workflow to the file names the engine knows. Past 400
 * lines: every asset route of the proxy with its checks in the proxy's order, and the path, range and id rules
 * they share.
 */
import { createHash, randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import { createBLAKE3, type IHasher } from 'hash-wasm';
import { readJsonText, setOwn } from '../boundary/outside';
import { isRecord } from '../boundary/json-values';
import { fileKey, type FileRef, type StoredFile } from './generation-jobs';
import { readMultipart, type PartSink } from './multipart';
import type { V2Upstream } from './v2-jobs';
import { OutputIds } from './v2-output-ids';
import {
  MICROS_PER_DAY,
  guessContentType,
  nowMicros,
  pyIso,
  pyJson,
  pyRepr,
  sendEmpty,
  sendError,
  sendPyJson,
  sendServerError,
  type V2Request,
} from './v2-wire';

export { OutputIds } from './v2-output-ids';

/** One uploaded asset: the v2 record and where the engine keeps its bytes. */
export interface V2AssetRecord {
  id: string;
  /** `blake3:<hex>` of the bytes. */
  hash: string;
  sizeBytes: number;
  contentType: string;
  /** The `file_path` the client gave. */
  filePath: string;
  createdAt: string;
  /** The engine's input file (its name may carry a ` (n)` suffix, as ComfyUI renames a taken name). */
  ref: FileRef;
}

/** The proxy's cap on one upload (ComfyUI's own default, 100 MB). */
export const DEFAULT_MAX_UPLOAD_BYTES = 100 * 1024 * 1024;

/** Model directories the proxy would place a `.safetensors` upload in (security.py MODEL_ROOTS). */
const MODEL_ROOTS = [
  'checkpoints',
  'loras',
  'vae',
  'text_encoders',
  'diffusion_models',
  'clip_vision',
  'style_models',
  'embeddings',
  'diffusers',
  'vae_approx',
  'controlnet',
  'gligen',
  'upscale_models',
  'latent_upscale_models',
  'hypernetworks',
  'photomaker',
  'classifiers',
  'model_patches',
  'audio_encoders',
  'background_removal',
  'frame_interpolation',
  'geometry_estimation',
  'optical_flow',
];
const ALLOWED_ROOTS = [...MODEL_ROOTS, 'input'].sort();

/** The same bytes as the engine's generated stand-in files (stored-files.ts): a 1 MiB pattern, repeated. */
const GENERATED_CHUNK = Buffer.alloc(1 << 20, 'graph-gen sandbox file ');

type PathCheck = { ok: true; model: boolean; norm: string } | { ok: false; message: string };

/** security.validate_upload_path: refuses `..` and absolute paths, tells a model placement from an input. */
export function checkUploadPath(filePath: string): PathCheck {
  if (!filePath || filePath.startsWith('/') || filePath.startsWith('\\'))
    return { ok: false, message: `file_path must be relative: ${pyRepr(filePath)}` };
  const stripped = filePath.startsWith('models/') ? filePath.slice('models/'.length) : filePath;
  // As Python's PurePosixPath(...).parts: empty and `.` segments vanish, a leading `/` is a part of its own.
  const parts = stripped.split('/').filter((part) => part !== '' && part !== '.');
  if (stripped.startsWith('/')) parts.unshift('/');
  if (parts.length === 0)
    return { ok: false, message: `file_path must include a filename: ${pyRepr(filePath)}` };
  if (parts.includes('..'))
    return { ok: false, message: `file_path must not contain '..': ${pyRepr(filePath)}` };
  if (parts.length < 2) return { ok: true, model: false, norm: stripped };
  const root = parts[0];
  if (!ALLOWED_ROOTS.includes(root)) {
    return {
      ok: false,
      message: `'${root}' is not an allowlisted placement root (allowed: [${ALLOWED_ROOTS.map(pyRepr).join(', ')}])`,
    };
  }
  if (root !== 'input') return { ok: true, model: true, norm: stripped };
  return { ok: true, model: false, norm: parts.slice(1).join('/') };
}

/**
 * Where ComfyUI's /upload/image puts an input of a checked path (`checkUploadPath`'s `norm`): subfolder and name,
 * or undefined where it answers 400 (no name, or a subfolder outside its input directory).
 */
export function inputPlace(norm: string): { subfolder: string; filename: string } | undefined {
  const slash = norm.lastIndexOf('/');
  const subfolder = slash < 0 ? '' : norm.slice(0, slash);
  const filename = norm.slice(slash + 1);
  if (!filename || subfolder.startsWith('/') || subfolder.split('/').includes('..')) return undefined;
  return { subfolder, filename };
}

/**
 * Where the `file` part's bytes go: hashed with BLAKE3 as they come, kept, and counted against the cap. Past the
 * cap the rest is read and dropped (stopping the read would reset the connection before the client could read
 * its 413; aiohttp lingers to read it too).
 */
class UploadSink implements PartSink {
  readonly chunks: Buffer[] = [];
  size = 0;
  tooLarge = false;

  constructor(
    private readonly hasher: IHasher,
    private readonly maxBytes: number,
  ) {}

  write(chunk: Buffer): void {
    this.size += chunk.length;
    if (this.size > this.maxBytes) {
      this.tooLarge = true;
      this.chunks.length = 0;
    }
    if (this.tooLarge) return;
    this.hasher.update(chunk);
    this.chunks.push(Buffer.from(chunk));
  }

  end(): void {}
}

function sizeOf(file: StoredFile): number {
  return 'content' in file ? file.content.length : file.size;
}

/** `count` bytes of a stored file from `start`: its own bytes, or the generated pattern at that offset. */
function bytesOf(file: StoredFile, start: number, count: number): Readable {
  if ('content' in file) return Readable.from([file.content.subarray(start, start + count)]);
  let at = start;
  const end = start + count;
  return new Readable({
    read() {
      if (at >= end) {
        this.push(null);
        return;
      }
      const offset = at % GENERATED_CHUNK.length;
      const length = Math.min(end - at, GENERATED_CHUNK.length - offset);
      this.push(GENERATED_CHUNK.subarray(offset, offset + length));
      at += length;
    },
  });
}

/**
 * A `Range` header as aiohttp reads it (`bytes=<start>-<end>`, one range, `-<n>` for the tail) against a file
 * of `size` bytes: the bytes to send, or undefined when aiohttp answers 416.
 */
export function rangeOf(header: string, size: number): { start: number; count: number } | undefined {
  const match = /^bytes=(\d*)-(\d*)$/.exec(header);
  if (!match) return undefined;
  let start = match[1] ? Number(match[1]) : undefined;
  let end = match[2] ? Number(match[2]) + 1 : undefined;
  if (start === undefined && end !== undefined) {
    start = -(end - 1);
    end = undefined;
  }
  if (start === undefined) return undefined;
  if (end !== undefined && start >= end) return undefined;
  let count: number;
  if (start < 0 && end === undefined) {
    start = Math.max(0, start + size);
    count = size - start;
  } else count = Math.min(end ?? size, size) - start;
  if (start >= size) return undefined;
  return { start, count };
}

/** What ComfyUI's /view forces to a download rather than show. */
const FORCED_DOWNLOAD = new Set([
  'text/html',
  'text/html-sandboxed',
  'application/xhtml+xml',
  'text/javascript',
  'text/css',
]);

/** The v2 asset routes and the upload index, over the engine's files. */
export class V2Assets {
  readonly outputIds = new OutputIds();
  private readonly byId = new Map<string, V2AssetRecord>();
  private readonly idByHash = new Map<string, string>();

  constructor(
    private readonly upstream: V2Upstream,
    private readonly maxUploadBytes: number,
  ) {}

  /** Uploaded assets held now. */
  get records(): V2AssetRecord[] {
    return [...this.byId.values()];
  }

  private json(
    record: V2AssetRecord,
    createdNew: boolean | undefined,
    base: string,
  ): Record<string, unknown> {
    const body: Record<string, unknown> = {
      id: record.id,
      hash: record.hash || null,
      size_bytes: record.sizeBytes,
      content_type: record.contentType,
      file_path: record.filePath,
      created_at: record.createdAt,
      url: `${base}/api/v2/assets/${record.id}/content`,
      url_expires_at: pyIso(nowMicros() + MICROS_PER_DAY),
    };
    if (createdNew !== undefined) body.created_new = createdNew;
    return body;
  }

  async upload(r: V2Request): Promise<void> {
    const contentType = r.req.headers['content-type'] ?? '';
    if (!/^multipart\//i.test(contentType.trim()))
      return sendError(r.res, 422, 'invalid_request', 'Expected multipart/form-data.');
    const boundary = /boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType);
    if (!boundary) return sendError(r.res, 422, 'invalid_request', 'Malformed multipart body.');
    const hasher = await createBLAKE3();
    hasher.init();
    let sink: UploadSink | undefined;
    let partType: string | undefined;
    let fields: Record<string, string>;
    try {
      const form = await readMultipart(r.req, boundary[1] ?? boundary[2], (part) => {
        if (part.field !== 'file' || sink) return undefined;
        partType = part.contentType;
        sink = new UploadSink(hasher, this.maxUploadBytes);
        return sink;
      });
      fields = form.fields;
    } catch {
      if (sink?.tooLarge)
        return sendError(r.res, 413, 'payload_too_large', `Upload exceeds ${this.maxUploadBytes} bytes.`);
      return sendError(r.res, 422, 'invalid_request', 'Malformed multipart body.');
    }
    if (sink?.tooLarge)
      return sendError(r.res, 413, 'payload_too_large', `Upload exceeds ${this.maxUploadBytes} bytes.`);
    const field = (name: string) => (Object.hasOwn(fields, name) ? fields[name].trim() : undefined);
    if (!sink) return sendError(r.res, 422, 'invalid_request', "Missing 'file' part.");
    const filePath = field('file_path');
    if (!filePath) return sendError(r.res, 422, 'invalid_request', "Missing 'file_path'.");
    const path = checkUploadPath(filePath);
    if (!path.ok) return sendError(r.res, 422, 'invalid_request', path.message);
    const declaredType = field('content_type') || partType || 'application/octet-stream';
    const hash = `blake3:${hasher.digest('hex')}`;
    const expected = field('expected_hash');
    if (expected && expected.toLowerCase() !== hash)
      return sendError(
        r.res,
        409,
        'hash_mismatch',
        'Client-declared hash does not match the received bytes.',
      );
    const existing = this.byHash(hash);
    if (existing) return sendPyJson(r.res, 200, this.json(existing, false, r.base));
    if (path.model) {
      return sendError(
        r.res,
        422,
        'invalid_request',
        'Model-directory placement requires the proxy to run co-located with ComfyUI (start it with --comfyui-base-dir).',
      );
    }
    if (!this.upstream.reachable)
      return sendError(r.res, 500, 'upstream_error', 'Failed to reach ComfyUI for upload.');
    const place = inputPlace(path.norm);
    if (!place) return sendError(r.res, 500, 'upstream_error', 'ComfyUI rejected the upload.');
    const ref = this.storeInput(place.subfolder, place.filename, Buffer.concat(sink.chunks), declaredType);
    const record: V2AssetRecord = {
      id: randomUUID(),
      hash,
      sizeBytes: sink.size,
      contentType: declaredType,
      filePath,
      createdAt: pyIso(nowMicros()),
      ref,
    };
    this.byId.set(record.id, record);
    // First writer wins the hash slot, as the proxy's index.
    if (!this.idByHash.has(hash)) this.idByHash.set(hash, record.id);
    sendPyJson(r.res, 201, this.json(record, true, r.base));
  }

  /**
   * As ComfyUI's /upload/image without `overwrite`: a name taken by other bytes gets ` (1)`, ` (2)`...; the same
   * bytes under the same name are the same file. Logged in the engine's uploads like any upload it took.
   */
  private storeInput(subfolder: string, filename: string, bytes: Buffer, contentType: string): FileRef {
    const dot = filename.lastIndexOf('.');
    const stem = dot > 0 ? filename.slice(0, dot) : filename;
    const extension = dot > 0 ? filename.slice(dot) : '';
    let name = filename;
    for (let n = 1; ; n++) {
      const taken = this.upstream.jobs.files.get(fileKey({ filename: name, subfolder, type: 'input' }));
      if (!taken || ('content' in taken && taken.content.equals(bytes))) break;
      name = `${stem} (${n})${extension}`;
    }
    const ref: FileRef = { filename: name, subfolder, type: 'input' };
    this.upstream.jobs.files.set(fileKey(ref), { content: bytes, contentType });
    this.upstream.uploads.push({
      route: 'image',
      name,
      subfolder,
      type: 'input',
      size: bytes.length,
      sha256: createHash('sha256').update(bytes).digest('hex'),
      contentType,
      fields: { type: 'input', subfolder },
      headers: {},
    });
    return ref;
  }

  private byHash(hash: string): V2AssetRecord | undefined {
    const id = this.idByHash.get(hash);
    return id === undefined ? undefined : this.byId.get(id);
  }

  async fromHash(r: V2Request, bodyLimit: number): Promise<void> {
    const raw = await r.body(bodyLimit);
    const read = raw === undefined ? undefined : readJsonText(raw.toString('utf8'));
    if (!read?.ok) return sendError(r.res, 400, 'invalid_request', 'Body must be JSON.');
    if (!isRecord(read.value)) return sendServerError(r.res);
    const hash = Object.hasOwn(read.value, 'hash') ? read.value.hash : undefined;
    if (typeof hash !== 'string') return sendError(r.res, 422, 'invalid_request', "Missing 'hash'.");
    const record = this.byHash(hash);
    if (!record) return sendError(r.res, 404, 'blob_not_found', 'No blob the caller may mint from.');
    sendPyJson(r.res, 200, this.json(record, false, r.base));
  }

  /** The proxy registers host files only beside a ComfyUI install (`--comfyui-base-dir`); the sandbox has none. */
  fromPath(r: V2Request): void {
    sendError(
      r.res,
      422,
      'invalid_request',
      'Host-path registration requires --comfyui-base-dir (the proxy must share a filesystem with ComfyUI).',
    );
  }

  headByHash(r: V2Request): void {
    sendEmpty(r.res, this.idByHash.has(r.param) ? 200 : 404);
  }

  get(r: V2Request): void {
    const record = this.byId.get(r.param);
    if (record) return sendPyJson(r.res, 200, this.json(record, undefined, r.base));
    const output = this.outputIds.read(r.param);
    if (!output) return sendError(r.res, 404, 'not_found', 'Unknown asset id.');
    const now = nowMicros();
    const body: Record<string, unknown> = {
      id: r.param,
      hash: null,
      size_bytes: 0,
      content_type: guessContentType(output.filename),
      file_path: output.filename,
      created_at: pyIso(now),
      url: `${r.base}/api/v2/assets/${r.param}/content`,
      url_expires_at: pyIso(now + MICROS_PER_DAY),
    };
    if (output.jobId !== undefined) body.job_id = output.jobId;
    sendPyJson(r.res, 200, body);
  }

  content(r: V2Request): void {
    const ref = this.byId.get(r.param)?.ref ?? this.outputIds.read(r.param);
    if (!ref) return sendError(r.res, 404, 'not_found', 'Unknown asset id.');
    this.view(r, { filename: ref.filename, subfolder: ref.subfolder, type: ref.type });
  }

  /** The proxy streams ComfyUI's /view: its status, type, length and range headers, nothing else. */
  private view(r: V2Request, ref: FileRef): void {
    if (!this.upstream.reachable)
      return sendError(r.res, 500, 'upstream_error', 'Failed to reach ComfyUI for content.');
    const file = this.upstream.jobs.files.get(fileKey(ref));
    if (!file) {
      return sendError(
        r.res,
        404,
        'output_unavailable',
        'Output bytes are no longer retrievable upstream. Retrying cannot help; re-execute with a changed prompt hash.',
      );
    }
    const size = sizeOf(file);
    const asked = r.req.headers.range;
    const range = asked === undefined ? { start: 0, count: size } : rangeOf(asked, size);
    if (!range) {
      // ComfyUI answers 416, which the proxy passes on as an upstream error.
      return sendError(r.res, 502, 'upstream_error', 'ComfyUI returned an unexpected status for the output.');
    }
    let type = guessContentType(ref.filename);
    if (FORCED_DOWNLOAD.has(type)) type = 'application/octet-stream';
    r.res.writeHead(asked === undefined ? 200 : 206, {
      'content-type': type,
      'content-length': range.count,
      'accept-ranges': 'bytes',
      ...(asked === undefined
        ? {}
        : { 'content-range': `bytes ${range.start}-${range.start + range.count - 1}/${size}` }),
    });
    if (r.req.method === 'HEAD') {
      r.res.end();
      return;
    }
    bytesOf(file, range.start, range.count).pipe(r.res);
  }

  delete(r: V2Request): void {
    const record = this.byId.get(r.param);
    if (!record) return sendError(r.res, 404, 'not_found', 'Unknown asset id.');
    this.byId.delete(record.id);
    if (this.idByHash.get(record.hash) === record.id) this.idByHash.delete(record.hash);
    sendEmpty(r.res, 204);
  }

  /**
   * A submitted workflow with its `core/ASSET` references replaced by the engine's file names, and the ids of
   * those that name nothing (the proxy refuses the submit then). `value` is JSON read with a bounded depth.
   */
  resolveWorkflow(value: unknown): { workflow: unknown; missing: string[] } {
    const missing: string[] = [];
    const walk = (node: unknown): unknown => {
      if (isRecord(node) && Object.hasOwn(node, '__type') && node.__type === 'core/ASSET') {
        const info = Object.hasOwn(node, 'info') ? node.info : undefined;
        if (!isRecord(info)) {
          missing.push('<malformed core/ASSET: missing info>');
          return node;
        }
        const resolved = this.resolveRef(info);
        if (resolved === undefined) {
          missing.push(Object.hasOwn(info, 'id') ? pythonStr(info.id) : '<no id>');
          return node;
        }
        return resolved;
      }
      if (Array.isArray(node)) return node.map(walk);
      if (isRecord(node)) {
        const copy: Record<string, unknown> = {};
        for (const key of Object.keys(node)) setOwn(copy, key, walk(node[key]));
        return copy;
      }
      return node;
    };
    return { workflow: walk(value), missing };
  }

  private resolveRef(info: Record<string, unknown>): string | undefined {
    let record: V2AssetRecord | undefined;
    const id = Object.hasOwn(info, 'id') ? info.id : undefined;
    if (typeof id === 'string') {
      record = this.byId.get(id);
      if (!record) {
        // An output's id names its bare file, which a loader then looks for among the inputs.
        const output = this.outputIds.read(id);
        if (output) return output.subfolder ? `${output.subfolder}/${output.filename}` : output.filename;
      }
    }
    const hash = Object.hasOwn(info, 'hash') ? info.hash : undefined;
    if (!record && typeof hash === 'string') record = this.byHash(hash);
    if (!record) return undefined;
    return record.ref.subfolder ? `${record.ref.subfolder}/${record.ref.filename}` : record.ref.filename;
  }
}

/** Python's `str()` of a JSON value, as the proxy names an unresolvable id. */
function pythonStr(value: unknown): string {
  if (typeof value === 'string') return value;
  if (value === null) return 'None';
  if (typeof value === 'boolean') return value ? 'True' : 'False';
  if (typeof value === 'number') return String(value);
  return pyJson(value);
}
