/**
 * The generation service's REST stand-in and its storage host (signed download addresses).
 * (Filled in by issue 3.)
 */
import type { SandboxServer } from './server';
import type { GenerationJobs } from './generation-jobs';

export interface GenerationServiceOptions {
  /** Raw status words as some deployments answer them, instead of the spec's five. */
  statusWords?: 'spec' | 'raw';
}

export interface GenerationService {
  /** The separate storage server that signed download addresses point at. */
  storageUrl: string;
  storage: SandboxServer;
  close(): Promise<void>;
}

export async function mountGenerationService(
  _server: SandboxServer,
  _jobs: GenerationJobs,
  _options: GenerationServiceOptions,
): Promise<GenerationService> {
  throw new Error('not built yet');
}
