/**
 * The automation service's stand-in: GET /api/v<version>/workflows with cursor paging.
 * (Owned by the automation work; filled in by issue 2.)
 */
import type { SandboxServer } from './server';

export interface AutomationServiceOptions {
  /** The key expected in the key header; undefined accepts any request. */
  apiKey?: string;
  /** Header that carries the key (default X-AUTOMATION-API-KEY). */
  headerName?: string;
  /** How many workflows to seed (default 0). */
  workflows?: number;
}

export interface AutomationService {
  /** Replaces the stored workflows with `count` generated ones (every third inactive). */
  seed(count: number): void;
}

export function mountAutomationService(
  _server: SandboxServer,
  _options: AutomationServiceOptions,
): AutomationService {
  return { seed: () => undefined };
}
