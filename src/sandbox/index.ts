/**
 * The sandbox: one local server on 127.0.0.1 that speaks both services' protocols (spec/), with fault
 * injection and counters for tests, benchmarks and `npm start`. A second server plays the storage host
 * that signed download addresses point at.
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

export interface SandboxOptions {
  port?: number;
  automation?: AutomationServiceOptions;
  /** The generation service's key; undefined = a self-hosted server (no key, /api/view answers 200). */
  generationApiKey?: string;
  generation?: GenerationServiceOptions;
  events?: GenerationEventsOptions;
  /** A login in front of the whole server (SandboxServer.login), as a reverse proxy puts one. */
  login?: SandboxLogin;
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
  close(): Promise<void>;
}

export async function startSandbox(options: SandboxOptions = {}): Promise<Sandbox> {
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
    async close() {
      events.close();
      await generation.close();
      await server.close();
    },
  };
}

export { SandboxServer } from './server';
export type { Fault, SandboxLogin } from './server';
