/**
 * The generation stand-in's routes of files (generation-service.ts mounts them): uploads (`/upload/image`,
 * `/upload/mask`, streamed multipart, a taken name renamed as self-hosted servers do), and downloads (`/view`:
 * the file itself on a self-hosted server; on the cloud a redirect to a signed address on the separate storage
 * host, which refuses a second means of authentication, a wrong signature and an expired one, as object stores
 * do). The bytes are stored-files.ts's. No Node-RED inside.
 */
import { createHmac, randomBytes } from 'node:crypto';
import path from 'node:path';
import type { RequestContext, SandboxServer } from './server';
import { fileKey, type FileRef, type StoredFile } from './generation-jobs';
import type { GenerationRoutes } from './generation-routes';
import { multipartBoundary, readMultipart } from './multipart';
import { TINY_PNG, UploadSink, sendFile } from './stored-files';

const DEFAULT_KEEP_UPLOAD_BYTES = 16 << 20;

export function mountUploadRoutes(routes: GenerationRoutes): void {
  const { jobs, options, uploads, route } = routes;

  const upload = (kind: 'image' | 'mask') => async (ctx: RequestContext) => {
    const boundary = multipartBoundary(ctx.req.headers['content-type']);
    if (!boundary) {
      ctx.res.writeHead(400, { 'content-type': 'text/plain' }).end('Expected a multipart/form-data body');
      return;
    }
    let sink: UploadSink | undefined;
    let form;
    try {
      form = await readMultipart(ctx.req, boundary, (part) => {
        if (part.field !== 'image' || sink) return undefined;
        sink = new UploadSink(
          options.keepUploadBytes ?? DEFAULT_KEEP_UPLOAD_BYTES,
          options.uploadDirectory,
          options.hashUploads !== false,
        );
        return sink;
      });
    } catch (error) {
      ctx.res.writeHead(400, { 'content-type': 'text/plain' }).end(String(error));
      return;
    }
    const image = form.files.find((file) => file.field === 'image');
    if (!image || !sink) {
      // Self-hosted servers answer a missing file with a bare 400.
      ctx.res.writeHead(400).end();
      return;
    }
    const fields = form.fields;
    const type = fields.type || 'input';
    let subfolder = fields.subfolder ?? '';
    if (kind === 'mask') {
      let original: Partial<FileRef> | undefined;
      try {
        original = JSON.parse(fields.original_ref ?? '') as Partial<FileRef>;
      } catch {
        original = undefined;
      }
      if (!original?.filename) {
        ctx.res
          .writeHead(400, { 'content-type': 'text/plain' })
          .end('original_ref with a filename is required');
        return;
      }
      subfolder = fields.subfolder ?? 'clipspace';
    }
    if (subfolder.split(/[\\/]/).includes('..') || path.isAbsolute(subfolder)) {
      ctx.res.writeHead(400).end();
      return;
    }
    let name = path.basename(image.filename || 'image.png');
    if (fields.overwrite !== 'true' && fields.overwrite !== '1') {
      // As self-hosted servers do: an existing name gets a " (n)" suffix instead of being replaced.
      const extension = path.extname(name);
      const stem = name.slice(0, name.length - extension.length);
      for (let n = 1; jobs.files.has(fileKey({ filename: name, subfolder, type })); n++) {
        name = `${stem} (${n})${extension}`;
      }
    }
    jobs.files.set(fileKey({ filename: name, subfolder, type }), sink.stored(image.contentType));
    uploads.push({
      route: kind,
      name,
      subfolder,
      type,
      size: sink.size,
      sha256: sink.hash?.digest('hex') ?? '',
      contentType: image.contentType,
      fields,
      headers: ctx.req.headers,
    });
    ctx.json(200, { name, subfolder, type });
  };
  route('POST', '/upload/image', upload('image'));
  route('POST', '/upload/mask', upload('mask'));
}

/** `/view`, and the storage host's signed addresses it redirects to (the cloud's). */
export function mountFileRoutes(routes: GenerationRoutes, storage: SandboxServer): void {
  const { jobs, options, route, notFound } = routes;
  const signingKey = randomBytes(32);
  const sign = (key: string, expires: number) =>
    createHmac('sha256', signingKey).update(`${key}\n${expires}`).digest('hex');

  const findFile = (ref: FileRef): StoredFile | undefined => {
    const stored = jobs.files.get(fileKey(ref));
    if (stored) return stored;
    // Outputs the event runner reported but did not store: serve a tiny image so flows run end to end.
    for (const job of jobs.jobs.values()) {
      for (const output of Object.values(job.outputs)) {
        for (const list of Object.values(output)) {
          if (!Array.isArray(list)) continue;
          for (const item of list as Array<Partial<FileRef>>) {
            if (
              item?.filename === ref.filename &&
              (item.subfolder ?? '') === ref.subfolder &&
              (item.type ?? 'output') === ref.type
            )
              return { content: TINY_PNG, contentType: 'image/png' };
          }
        }
      }
    }
    return undefined;
  };

  route('GET', '/view', (ctx) => {
    const query = ctx.url.searchParams;
    const ref: FileRef = {
      filename: query.get('filename') ?? '',
      subfolder: query.get('subfolder') ?? '',
      type: query.get('type') || 'output',
    };
    if (!ref.filename) return ctx.json(400, { code: 'bad_request', message: 'filename is required' });
    const file = findFile(ref);
    if (!file) return notFound(ctx, `file ${ref.filename} not found`);
    if (jobs.selfHosted) return sendFile(ctx.res, ref.filename, file);
    const key = Buffer.from(JSON.stringify(ref)).toString('base64url');
    const expires = Math.floor(Date.now() / 1000) + (options.signedAddressSeconds ?? 300);
    const address = `${storage.url}/files/${key}?expires=${expires}&signature=${sign(key, expires)}`;
    // A session cookie as cloud gateways set: a client with a cookie jar would carry it to the storage host.
    ctx.res
      .writeHead(302, {
        location: address,
        'set-cookie': 'session=sandbox-session; Path=/',
        'content-length': 0,
      })
      .end();
  });

  storage.route('GET', /^\/files\/([^/]+)$/, (ctx) => {
    const seen = ctx.req.headers;
    if (seen['x-api-key'] !== undefined || seen.authorization !== undefined) {
      // As object stores do: a request with a second means of authentication is refused.
      return ctx.text(400, 'Only one authentication mechanism allowed');
    }
    const key = ctx.params[0];
    const expires = Number(ctx.url.searchParams.get('expires'));
    const signature = ctx.url.searchParams.get('signature') ?? '';
    if (!Number.isFinite(expires) || signature !== sign(key, expires))
      return ctx.text(403, 'Signature mismatch');
    if (expires < Date.now() / 1000) return ctx.text(403, 'Request has expired');
    const ref = JSON.parse(Buffer.from(key, 'base64url').toString('utf8')) as FileRef;
    const file = findFile(ref);
    if (!file) return ctx.text(404, 'NoSuchKey');
    sendFile(ctx.res, ref.filename, file);
  });
}
