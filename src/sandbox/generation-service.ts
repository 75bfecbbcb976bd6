/**
 * The generation service's REST stand-in and its storage host, behaving as real deployments do (spec and
 * FACTS.md): node definitions, streamed uploads, submit validated like a real server, status in spec or raw
 * words, jobs/history endpoints (each switchable off to test fallbacks), downloads that redirect to a signed
 * address on a separate storage server (cloud) or answer with the file (self-hosted), queue and interrupt,
 * and the user data where the server's page saves workflows (user-data.ts).
 * With no API key it is a self-hosted server: no key checked, every route also served without `/api`, answering
 * as the ComfyUI version it is set to (0.8.0 or 0.33.0 behaviours). This file mounts the route groups, each in
 * its own module: a job's (generation-job-routes.ts), the queue's (generation-queue-routes.ts), the files'
 * (generation-file-routes.ts), on what they share (generation-routes.ts); what the server says of itself is here.
 */
import type { SandboxServer, SeenRequest } from './server';
import { SandboxServer as Server } from './server';
import { fileKey, type FileRef, type GenerationJobs, type StoredFile } from './generation-jobs';
import { trustOrigin } from '../http/address-policy';
import { mountUserData, type UserData } from './user-data';
import { defaultNodeDefinitions, type NodeDefinition } from './node-definitions';
import { generationRoutes, type GenerationServiceOptions, type UploadRecord } from './generation-routes';
import { mountJobRoutes } from './generation-job-routes';
import { mountQueueRoutes } from './generation-queue-routes';
import { mountFileRoutes, mountUploadRoutes } from './generation-file-routes';

export { defaultNodeDefinitions, validatePrompt, type NodeDefinition } from './node-definitions';
export type { GenerationServiceOptions, UploadRecord } from './generation-routes';

export interface GenerationService {
  /** The separate storage server that signed download addresses point at. */
  storageUrl: string;
  storage: SandboxServer;
  /** Options as they are now: tests may change them between requests (e.g. switch an endpoint off). */
  options: GenerationServiceOptions;
  /** Every upload received, in order. */
  uploads: UploadRecord[];
  /** The node definitions served by object_info (tests may add to them). */
  definitions: Record<string, NodeDefinition>;
  /** Requests the storage host saw that carried the API key, a cookie, or any X-API-Key header. */
  storageLeaks(): SeenRequest[];
  /** The server's user data (`workflows/<name>.json` are the workflows its page saved). */
  userData: UserData;
  /** Stores a file the service can serve (a generated stream of `size` bytes when `size` is given). */
  addFile(ref: FileRef, file: StoredFile): void;
  close(): Promise<void>;
}

export async function mountGenerationService(
  server: SandboxServer,
  jobs: GenerationJobs,
  initialOptions: GenerationServiceOptions,
): Promise<GenerationService> {
  const options: GenerationServiceOptions = { ...initialOptions };
  const definitions = { ...defaultNodeDefinitions(), ...initialOptions.nodeDefinitions };
  const uploads: UploadRecord[] = [];
  const storage = new Server();
  await storage.listen(options.storagePort ?? 0);
  // The storage host plays a cloud's, on 127.0.0.1: trusted by the address rule of clients in this process
  // (a client in another process is told to name it in GRAPH_GEN_TRUSTED_ORIGINS).
  const distrustStorage = trustOrigin(storage.url);

  // Self-hosted servers serve every route under /api and without it (generation-routes.ts); the cloud only under
  // /api. Their unknown routes answer aiohttp's text/plain "404: Not Found".
  server.plainNotFound = jobs.selfHosted;
  const routes = generationRoutes(server, jobs, options, definitions, uploads);
  const { route, version } = routes;

  route('GET', '/object_info', (ctx) => ctx.json(200, definitions));
  route('GET', '/object_info/([^/]+)', (ctx) => {
    const name = decodeURIComponent(ctx.params[0]);
    const definition = definitions[name];
    ctx.json(200, definition ? { [name]: definition } : {});
  });
  mountUploadRoutes(routes);
  mountJobRoutes(routes);
  mountFileRoutes(routes, storage);

  // What a self-hosted server says of itself (the cloud stand-in names no version).
  route('GET', '/system_stats', (ctx) => {
    if (!jobs.selfHosted) return server.notFound(ctx);
    ctx.json(200, {
      system: {
        os: 'posix',
        python_version: '3.11.2',
        embedded_python: false,
        comfyui_version: options.serverVersion ?? '0.8.0',
        pytorch_version: '1.13.1',
        argv: ['main.py', '--cpu'],
      },
      devices: [],
    });
  });
  route('GET', '/features', (ctx) =>
    ctx.json(200, { supports_preview_metadata: true, max_upload_size: 104857600 }),
  );

  mountQueueRoutes(routes);

  const userData = mountUserData(route, version);

  return {
    storageUrl: storage.url,
    storage,
    options,
    uploads,
    definitions,
    userData,
    storageLeaks: () =>
      storage.counters.requests.filter((seen) => {
        if (seen.headers['x-api-key'] !== undefined || seen.headers.cookie !== undefined) return true;
        if (!jobs.apiKey) return false;
        const everything = `${seen.path}?${seen.query.toString()} ${JSON.stringify(seen.headers)}`;
        return everything.includes(jobs.apiKey) || everything.includes(encodeURIComponent(jobs.apiKey));
      }),
    addFile: (ref, file) => jobs.files.set(fileKey(ref), file),
    close: () => {
      distrustStorage();
      return storage.close();
    },
  };
}
