/**
 * A self-hosted server's user data routes (ComfyUI's app/user_manager.py), as measured on v0.8.0 and
 * v0.33.0: where its page keeps what it saves, workflows under `workflows/`. One user, files in memory.
 * - `GET /userdata?dir=D[&recurse=true][&full_info=true][&split=true]`: the files in D (and below with
 *   `recurse`), in the order they were first saved (a real server answers in its file system's order, not
 *   sorted); paths relative to D; `full_info` gives `{path, size, modified, created}`, times in seconds before
 *   0.33 (measured on 0.8.0) and in whole milliseconds from 0.33. No `dir`: 400 `Directory not provided`; a D
 *   outside the user's folder: 403 `Invalid directory`; a D never made (nothing saved in it yet): 404
 *   `Directory not found`, all text/plain.
 * - `GET /userdata/{file}`, the path URL-encoded whole (`workflows%2Fa.json`) and decoded a second time when
 *   it still holds `%`, as the server does: the file (`application/json` for `.json`; from 0.33 also
 *   `Content-Disposition: attachment` and `nosniff`); missing: 404 with an empty body; outside: 403 empty.
 * - `POST /userdata/{file}?overwrite=false&full_info=true`: the body stored as it is (any content type);
 *   answers its path under the user's folder (JSON text) or its `full_info`; 409 `File already exists` when
 *   `overwrite=false` finds one; over 100 MiB 413.
 * - `DELETE /userdata/{file}`: 204, or 404 when missing.
 */
import path from 'node:path';
import type { RequestContext } from './server';

/** One file in the user's folder. */
export interface UserFile {
  content: Buffer;
  /** Milliseconds since 1970. */
  modified: number;
  created: number;
}

export interface UserData {
  /** Path under the user's folder (`workflows/a.json`) -> file. */
  files: Map<string, UserFile>;
  /** Stores a file as the page's save does (its folders made as needed). */
  save(file: string, content: Buffer | string): void;
}

type Route = (
  method: string,
  pattern: string,
  handler: (ctx: RequestContext) => void | Promise<void>,
) => void;

/** aiohttp's own limit on a request body (the server sets it to its upload limit). */
const MAX_BODY_BYTES = 100 * 1024 * 1024;
const PLAIN = { 'content-type': 'text/plain; charset=utf-8' };

/** Python's `urllib.parse.unquote`: runs of `%XX` decoded as UTF-8, anything else left as it is. */
function unquote(text: string): string {
  return text.replace(/(?:%[0-9A-Fa-f]{2})+/g, (run) =>
    Buffer.from(run.replace(/%/g, ''), 'hex').toString('utf8'),
  );
}

/** A path under the user's folder as the server resolves it (undefined when it would leave the folder). */
function inside(raw: string): string | undefined {
  const file = raw.includes('%') ? unquote(raw) : raw;
  if (file.startsWith('/')) return undefined;
  const resolved = path.posix.normalize(`/user/${file}`);
  return resolved.startsWith('/user/') ? resolved.slice('/user/'.length) : undefined;
}

/** `version()` is the server's as major * 1000 + minor (0.33 is 33). */
export function mountUserData(route: Route, version: () => number): UserData {
  const files = new Map<string, UserFile>();
  /** Folders made by saves: a real folder stays when its last file is deleted. */
  const folders = new Set<string>();

  const save = (file: string, content: Buffer | string) => {
    const now = Date.now();
    const bytes = Buffer.isBuffer(content) ? content : Buffer.from(content);
    files.set(file, { content: bytes, modified: now, created: files.get(file)?.created ?? now });
    for (let folder = path.posix.dirname(file); folder !== '.'; folder = path.posix.dirname(folder))
      folders.add(folder);
  };
  const time = (ms: number) => (version() >= 33 ? Math.round(ms) : ms / 1000);
  const info = (file: string, relativeTo: string) => {
    const entry = files.get(file)!;
    return {
      path: relativeTo ? file.slice(relativeTo.length + 1) : file,
      size: entry.content.length,
      modified: time(entry.modified),
      created: time(entry.created),
    };
  };
  /** The file a route names (decoded once by the route, once more here when it holds `%`), else answered. */
  const named = (ctx: RequestContext): string | undefined => {
    let once: string;
    try {
      once = decodeURIComponent(ctx.params[0]);
    } catch {
      once = unquote(ctx.params[0]);
    }
    const file = inside(once);
    if (file === undefined || file === '') ctx.res.writeHead(403, { 'content-length': 0 }).end();
    return file || undefined;
  };

  route('GET', '/userdata', (ctx) => {
    const query = ctx.url.searchParams;
    const directory = query.get('dir') ?? '';
    if (!directory) return ctx.text(400, 'Directory not provided', PLAIN);
    const folder = inside(directory);
    if (folder === undefined) return ctx.text(403, 'Invalid directory', PLAIN);
    const root = folder.replace(/\/+$/, '');
    if (root !== '' && !folders.has(root)) return ctx.text(404, 'Directory not found', PLAIN);
    const recurse = query.get('recurse')?.toLowerCase() === 'true';
    const fullInfo = query.get('full_info')?.toLowerCase() === 'true';
    const split = query.get('split')?.toLowerCase() === 'true';
    const listed = [...files.keys()].filter((file) => {
      if (root !== '' && !file.startsWith(`${root}/`)) return false;
      const rest = root === '' ? file : file.slice(root.length + 1);
      return recurse || !rest.includes('/');
    });
    ctx.json(
      200,
      listed.map((file) => {
        if (fullInfo) return info(file, root);
        const relative = root === '' ? file : file.slice(root.length + 1);
        return split ? [relative, ...relative.split('/')] : relative;
      }),
    );
  });

  route('GET', '/userdata/([^/]+)', (ctx) => {
    const file = named(ctx);
    if (file === undefined) return;
    const entry = files.get(file);
    if (!entry) {
      ctx.res.writeHead(404, { 'content-type': 'application/octet-stream', 'content-length': 0 }).end();
      return;
    }
    const headers: Record<string, string | number> = {
      'content-type': file.toLowerCase().endsWith('.json') ? 'application/json' : 'application/octet-stream',
      'content-length': entry.content.length,
      'last-modified': new Date(entry.modified).toUTCString(),
    };
    if (version() >= 33) {
      headers['x-content-type-options'] = 'nosniff';
      headers['content-disposition'] = 'attachment';
    }
    ctx.res.writeHead(200, headers).end(entry.content);
  });

  route('POST', '/userdata/([^/]+)', async (ctx) => {
    const file = named(ctx);
    if (file === undefined) return;
    const length = Number(ctx.req.headers['content-length']);
    if (length > MAX_BODY_BYTES) {
      return ctx.text(
        413,
        `Maximum request body size ${MAX_BODY_BYTES} exceeded, actual body size ${length}`,
        PLAIN,
      );
    }
    const overwrite = ctx.url.searchParams.get('overwrite') !== 'false';
    const fullInfo = ctx.url.searchParams.get('full_info')?.toLowerCase() === 'true';
    if (!overwrite && files.has(file)) return ctx.text(409, 'File already exists', PLAIN);
    save(file, await ctx.body());
    ctx.json(200, fullInfo ? info(file, '') : file);
  });

  route('DELETE', '/userdata/([^/]+)', (ctx) => {
    const file = named(ctx);
    if (file === undefined) return;
    if (!files.delete(file)) {
      ctx.res.writeHead(404, { 'content-type': 'application/octet-stream', 'content-length': 0 }).end();
      return;
    }
    ctx.res.writeHead(204).end();
  });

  return { files, save };
}
