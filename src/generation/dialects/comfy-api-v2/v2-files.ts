/**
 * Comfy API v2's files over REST: uploads as assets, and downloads of a job's outputs by asset id.
 *
 * An upload is hashed first (BLAKE3, the file streamed, never read whole): when the server already has those
 * bytes (`HEAD /api/v2/assets/by-hash/blake3:<hex>`), their record is asked for (`POST /assets/from-hash`) and
 * no byte is sent; else the file goes as multipart (`POST /api/v2/assets`, `file_path` =
 * `input/graph-gen/<hash>/<name>`, `expected_hash` so bytes changed on the way are refused). The result is
 * shaped like today's upload result (`name` = the path under `input/` a workflow names, `type: input`) from
 * where the server keeps the bytes (a server that had them keeps them under the first name they were uploaded
 * with), plus `asset_id` and `hash`.
 * v2 has no mask route: a mask upload is refused in a sentence.
 *
 * A download (`GET /api/v2/assets/{id}/content`, with the token: the same host) is streamed; when the transfer
 * breaks mid-body it goes on from the byte it reached (`Range: bytes=<received>-`, a 206 whose Content-Range
 * starts there), a few times at most. No Node-RED inside.
 */
import { createReadStream } from 'node:fs';
import { Readable } from 'node:stream';
import { createBLAKE3 } from 'hash-wasm';
import type { HttpClient, RawResponse } from '../../../http/client';
import { ServiceError, invalidInput } from '../../../http/errors';
import { shownValue } from '../../../boundary/json-values';
import { multipartBody, type FormPart } from '../../transfer/multipart-body';
import {
  uploadPartOf,
  type FileReference,
  type OpenFile,
  type UploadRequest,
  type UploadResult,
} from '../../transfer/rest-client';
import { readV2Asset, type V2Asset } from './v2-answers';

export interface V2FilesOptions {
  /** The folder under `input/` uploads are stored in ('' for `input/` itself); default `graph-gen`. */
  subfolder?: string;
  /** How many times a download that broke off is resumed. */
  resumes?: number;
}

export const DEFAULT_V2_SUBFOLDER = 'graph-gen';
const DEFAULT_RESUMES = 3;
/** Chunks a file is hashed in. */
const HASH_CHUNK = 1 << 20;

/** `blake3:<hex>` of the bytes, or of a file streamed from its path. */
export async function blake3Of(source: Buffer | string, signal?: AbortSignal): Promise<string> {
  const hasher = await createBLAKE3();
  hasher.init();
  if (Buffer.isBuffer(source)) hasher.update(source);
  else {
    for await (const chunk of createReadStream(source, { highWaterMark: HASH_CHUNK, signal }))
      hasher.update(chunk as Buffer);
  }
  return `blake3:${hasher.digest('hex')}`;
}

function header(response: RawResponse, name: string): string | undefined {
  const value = response.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/** A header that is a whole number of bytes; undefined for anything else. */
function byteCount(text: string | undefined): number | undefined {
  if (text === undefined || !/^\d{1,15}$/.test(text.trim())) return undefined;
  return Number(text.trim());
}

/** `bytes <start>-<end>/<total or *>`, read; undefined for anything else. */
function contentRangeOf(text: string | undefined): { start: number; total?: number } | undefined {
  const match = text === undefined ? null : /^bytes (\d{1,15})-(\d{1,15})\/(\d{1,15}|\*)$/.exec(text.trim());
  if (!match) return undefined;
  return { start: Number(match[1]), total: match[3] === '*' ? undefined : Number(match[3]) };
}

/** Whether a text holds a control character (a line break would end a multipart header). */
function hasControl(text: string): boolean {
  for (const char of text) {
    const code = char.charCodeAt(0);
    if (code < 0x20 || code === 0x7f) return true;
  }
  return false;
}

/**
 * The name to store a file under: the base name of what was given (the server puts it in a folder of this
 * package's choosing). A path is the common case, not a mistake: a file-in node sets msg.filename to the path it
 * read, and today's API stores such an upload under its base name too.
 */
function checkedName(given: string): string {
  const name = given.slice(Math.max(given.lastIndexOf('/'), given.lastIndexOf('\\')) + 1);
  if (name === '' || name === '.' || name === '..' || hasControl(name)) {
    throw invalidInput(
      `the file name ${JSON.stringify(given.slice(0, 200))} is not a plain file name: name the file (its last part) without control characters, and not "", "." or ".." (Comfy API v2 uploads are stored in a folder of the config node's choosing under input/)`,
    );
  }
  return name;
}

/**
 * The name a workflow gives LoadImage for an input the server keeps at `input/<path>`: the path under `input/`,
 * folders and all (ComfyUI lists inputs in subfolders as `folder/name`), so `msg.payload.name` goes into a
 * workflow input as it does on today's API.
 */
function workflowNameOf(filePath: string): string {
  return filePath.startsWith('input/') ? filePath.slice('input/'.length) : filePath;
}

export class V2Files {
  private readonly subfolder: string;
  private readonly resumes: number;

  constructor(
    private readonly http: HttpClient,
    options: V2FilesOptions = {},
  ) {
    this.subfolder = options.subfolder ?? DEFAULT_V2_SUBFOLDER;
    this.resumes = options.resumes ?? DEFAULT_RESUMES;
  }

  /** Uploads an input file as an asset; no bytes are sent when the server has them already. */
  async upload(request: UploadRequest): Promise<UploadResult> {
    if (request.mask === true || request.originalRef !== undefined) {
      throw invalidInput(
        'Comfy API v2 has no route for mask uploads: upload the mask as an image (without msg.original_ref), or use a config node of a server that speaks ComfyUI’s own API',
      );
    }
    if (request.type !== undefined && request.type !== '' && request.type !== 'input') {
      throw invalidInput(
        `Comfy API v2 uploads inputs only, not files of type ${shownValue(request.type)}: leave the type empty or set it to input`,
      );
    }
    const { part: filePart, filename: name } = await uploadPartOf(request, 'file', checkedName);
    const named = `"${name}"`;
    const source = request.source;
    const hash = await blake3Of(source, request.signal).catch((error: NodeJS.ErrnoException) => {
      if (request.signal?.aborted || Buffer.isBuffer(source)) throw error;
      throw invalidInput(`The file to upload cannot be read: ${source} (${error.code ?? 'error'})`);
    });
    const known = await this.knownAsset(hash, named, request.signal);
    if (known) return this.resultOf(known, hash, name);

    const parts: FormPart[] = [
      filePart,
      { name: 'file_path', value: `input/${this.placeOf(hash, name)}` },
      { name: 'expected_hash', value: hash },
    ];
    const form = multipartBody(parts);
    const { status, body } = await this.http.json<unknown>('/api/v2/assets', {
      method: 'POST',
      // Each attempt needs a fresh body (undici destroys a stream whose connection failed).
      body: () => form.open(),
      headers: { 'content-type': form.contentType, 'content-length': String(form.length) },
      // The server keeps one record per hash: the same bytes again give the same record, never a second.
      idempotent: true,
      signal: request.signal,
      action: `uploading ${named}`,
    });
    const asset = readV2Asset(body);
    if (!asset.ok) {
      throw new ServiceError(
        'server_error',
        `the generation service answered the upload of ${named} without an asset (${asset.reason})`,
        { status, body: this.http.cleanForReport(body) },
      );
    }
    return this.resultOf(asset.value, hash, name);
  }

  /** The server's record of these bytes when it has them (asked by hash: no byte sent); else undefined. */
  private async knownAsset(hash: string, named: string, signal?: AbortSignal): Promise<V2Asset | undefined> {
    // The hash is ours, `blake3:` and hex: a path segment as it is.
    const head = await this.http.json<unknown>(`/api/v2/assets/by-hash/${hash}`, {
      method: 'HEAD',
      acceptStatus: [404],
      signal,
      action: `asking whether the server has ${named}`,
    });
    if (head.status === 404) return undefined;
    const { status, body } = await this.http.json<unknown>('/api/v2/assets/from-hash', {
      method: 'POST',
      json: { hash },
      // It only reads the record of bytes the server has.
      idempotent: true,
      // Deleted since the HEAD: uploaded after all.
      acceptStatus: [404],
      signal,
      action: `reading the server's record of ${named}`,
    });
    if (status === 404) return undefined;
    const asset = readV2Asset(body);
    return asset.ok ? asset.value : undefined;
  }

  /**
   * Where under `input/` new bytes go: a folder named by their hash, so a name is never taken by other bytes.
   * ComfyUI stores an upload whose name is taken by other bytes under a new name ("x (1).png") while the
   * proxy's record keeps the name asked for: a workflow would load the old file. Within its hash's folder a
   * name holds those bytes only.
   */
  private placeOf(hash: string, name: string): string {
    const folder = hash.slice('blake3:'.length, 'blake3:'.length + 16);
    return this.subfolder ? `${this.subfolder}/${folder}/${name}` : `${folder}/${name}`;
  }

  /**
   * The upload result as today's (`name`, `subfolder`, `type`), from where the server keeps the bytes: `name`
   * is the path under `input/` a workflow names (subfolder empty), as a result of today's API without one.
   */
  private resultOf(asset: V2Asset, hash: string, name: string): UploadResult {
    const result: UploadResult = {
      name: asset.filePath ? workflowNameOf(asset.filePath) || name : this.placeOf(hash, name),
      subfolder: '',
      type: 'input',
      asset_id: asset.id,
      hash: asset.hash ?? hash,
    };
    if (asset.filePath) result.file_path = asset.filePath;
    if (asset.createdNew !== undefined) result.created_new = asset.createdNew;
    return result;
  }

  /**
   * Opens an output for streaming by its `asset_id`; a transfer that breaks mid-body goes on by Range. A file
   * reference without an asset id was not made by a v2 server: refused in a sentence.
   */
  async openFile(ref: FileReference, signal?: AbortSignal): Promise<OpenFile> {
    const named = `"${ref.filename}"`;
    const assetId = typeof ref.asset_id === 'string' && ref.asset_id !== '' ? ref.asset_id : undefined;
    if (!assetId) {
      throw invalidInput(
        `this file was not made by a Comfy API v2 server (${named} has no asset_id): download it through the config node of the server that made it`,
      );
    }
    const address = `/api/v2/assets/${encodeURIComponent(assetId)}/content`;
    const first = await this.http.stream(address, { signal, action: `downloading ${named}` });
    const length = byteCount(header(first, 'content-length'));
    const contentType = header(first, 'content-type');
    const body = Readable.from(this.resumed(address, first.body, length, named, signal), {
      objectMode: false,
    });
    // Destroyed before a byte was read (a file larger than the caller takes), the generator never ran: the
    // first answer is closed here, or its connection would stay taken.
    body.once('close', () => first.body.destroy());
    return {
      contentType: contentType === undefined ? undefined : this.http.removeSecrets(contentType),
      contentLength: length,
      body,
    };
  }

  /** The bytes of a download, the rest asked for by Range each time the transfer breaks off. */
  private async *resumed(
    address: string,
    first: Readable,
    length: number | undefined,
    named: string,
    signal?: AbortSignal,
  ): AsyncGenerator<Buffer> {
    let body = first;
    let total = length;
    let received = 0;
    for (let resumes = 0; ; resumes++) {
      let broke: unknown;
      try {
        for await (const chunk of body as AsyncIterable<Buffer>) {
          received += chunk.length;
          yield chunk;
        }
      } catch (error) {
        broke = error;
      }
      if (broke === undefined && (total === undefined || received >= total)) return;
      if (signal?.aborted) throw broke ?? signal.reason;
      const reached = `broke off after ${received}${total === undefined ? '' : ` of ${total}`} bytes`;
      if (resumes >= this.resumes)
        throw new ServiceError(
          'network',
          `the download of ${named} ${reached}, resumed ${resumes} times: try again`,
        );
      const next = await this.http.stream(address, {
        headers: { range: `bytes=${received}-` },
        signal,
        action: `resuming the download of ${named}`,
      });
      const range = contentRangeOf(header(next, 'content-range'));
      if (
        next.status !== 206 ||
        range?.start !== received ||
        (total !== undefined && range.total !== undefined && range.total !== total)
      ) {
        next.body.destroy();
        throw new ServiceError(
          'network',
          `the download of ${named} ${reached}, and the server did not send the rest from there (HTTP ${next.status}${range ? `, ${header(next, 'content-range')}` : ', no matching Content-Range'}): try again`,
          { status: next.status },
        );
      }
      total ??= range.total;
      body = next.body;
    }
  }
}
