/**
 * The sandbox: one local server on 127.0.0.1 that speaks both services' protocols (spec/), with fault
 * injection and counters for tests, benchmarks and `npm start`. A second server plays the storage host
 * that signed download addresses point at.
 *
 * With `dialect: 'comfy-api-v2'` the server speaks Comfy API v2 instead, as comfy-api-proxy does in front of a
 * ComfyUI (v2-service.ts): only /api/v2 routes. The same job engine runs underneath, on a server of its own
 * (`upstream`, today's API and the automation service), as the ComfyUI behind the proxy.
 */
import { SandboxServer, type SandboxLogin } from './server';
import {
  mountAutomationService,
  type AutomationService,
  type AutomationServiceOptions,
} from './automation-service';
import { GenerationJobs } from './generation-jobs';
import {
  mountGenerationService,
  type GenerationService,
  type GenerationServiceOptions,
} from './generation-service';
import {
  mountGenerationEvents,
  type GenerationEvents,
  type GenerationEventsOptions,
} from './generation-events';
import { mountV2Service, sandboxControlNodes, type V2Service, type V2ServiceOptions } from './v2-service';

/** Which API the sandbox speaks: today's (ComfyUI's `/api/prompt`, `/ws`) or Comfy API v2 (`/api/v2`). */
export type SandboxDialect = 'comfyui' | 'comfy-api-v2';

export interface SandboxOptions {
  port?: number;
  automation?: AutomationServiceOptions;
  /** The generation service's key; undefined = a self-hosted server (no key, /api/view answers 200). */
  generationApiKey?: string;
  generation?: GenerationServiceOptions;
  events?: GenerationEventsOptions;
  /** A login in front of the whole server (SandboxServer.login), as a reverse proxy puts one. */
  login?: SandboxLogin;
  /** The API it speaks (default `comfyui`). `comfy-api-v2` ignores `generationApiKey` (v2 fronts a self-hosted ComfyUI). */
  dialect?: SandboxDialect;
  /** The v2 mode's options: bearer token, stream cap, keepalive and throttle periods, upload cap. */
  v2?: V2ServiceOptions;
}

export interface Sandbox {
  url: string;
  server: SandboxServer;
  faults: SandboxServer['faults'];
  counters: SandboxServer['counters'];
  automation: AutomationService;
  jobs: GenerationJobs;
  generation: GenerationService;
  events: GenerationEvents;
  dialect: SandboxDialect;
  /** v2 mode: its faults, counters, jobs and assets. */
  v2?: V2Service;
  /** v2 mode: the engine's own server (today's API and the automation service), the ComfyUI behind v2. */
  upstream?: SandboxServer;
  close(): Promise<void>;
}

export async function startSandbox(options: SandboxOptions = {}): Promise<Sandbox> {
  if (options.dialect === 'comfy-api-v2') return startV2Sandbox(options);
  const server = new SandboxServer();
  server.login = options.login;
  const automation = mountAutomationService(server, options.automation ?? {});
  const jobs = new GenerationJobs({ apiKey: options.generationApiKey });
  const generation = await mountGenerationService(server, jobs, options.generation ?? {});
  const events = mountGenerationEvents(server, jobs, options.events ?? {});
  await server.listen(options.port ?? 0);
  return {
    url: server.url,
    server,
    faults: server.faults,
    counters: server.counters,
    automation,
    jobs,
    generation,
    events,
    dialect: 'comfyui',
    async close() {
      events.close();
      await generation.close();
      await server.close();
    },
  };
}

async function startV2Sandbox(options: SandboxOptions): Promise<Sandbox> {
  const server = new SandboxServer();
  server.login = options.login;
  const upstream = new SandboxServer();
  const automation = mountAutomationService(upstream, options.automation ?? {});
  // The proxy's measured ComfyUI is v0.33.0, self-hosted (no key).
  const jobs = new GenerationJobs({});
  const generation = await mountGenerationService(upstream, jobs, {
    serverVersion: '0.33.0',
    ...options.generation,
    nodeDefinitions: { ...sandboxControlNodes(), ...options.generation?.nodeDefinitions },
  });
  const events = mountGenerationEvents(upstream, jobs, options.events ?? {});
  await upstream.listen(0);
  const v2 = mountV2Service(server, { jobs, generation, url: upstream.url }, options.v2);
  await server.listen(options.port ?? 0);
  return {
    url: server.url,
    server,
    faults: server.faults,
    counters: server.counters,
    automation,
    jobs,
    generation,
    events,
    dialect: 'comfy-api-v2',
    v2,
    upstream,
    async close() {
      v2.close();
      events.close();
      await generation.close();
      await upstream.close();
      await server.close();
    },
  };
}

export { SandboxServer } from './server';
export type { Fault, SandboxLogin } from './server';
export type { V2Faults, V2Service, V2ServiceOptions } from './v2-service';
