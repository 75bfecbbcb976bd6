/**
 * The generation service's live events: the /ws WebSocket, each job's event script, binary frames.
 * (Filled in by issue 4.)
 */
import type { SandboxServer } from './server';
import type { GenerationJobs } from './generation-jobs';

export interface GenerationEventsOptions {
  /** Run submitted jobs automatically (default true). */
  autoRun?: boolean;
}

export interface GenerationEvents {
  close(): void;
}

export function mountGenerationEvents(
  _server: SandboxServer,
  _jobs: GenerationJobs,
  _options: GenerationEventsOptions,
): GenerationEvents {
  return { close: () => undefined };
}
