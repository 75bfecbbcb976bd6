/**
 * The dialects a config node can speak, by name: the one place that chooses, and that says what each offers
 * beyond jobs and files (for the dialogs, which may hold a dialect's name and no connection yet). No Node-RED
 * inside.
 */
import { ComfyApiV2Dialect } from './comfy-api-v2/comfy-api-v2-dialect';
import { ComfyUiDialect } from './comfyui/comfyui-dialect';
import { ServiceError } from '../../http/errors';
import type { DialectName, DialectParts, ServerDialect } from './dialect';

export function createDialect(name: DialectName, parts: DialectParts): ServerDialect {
  switch (name) {
    case 'comfy-api-v2':
      return new ComfyApiV2Dialect(parts);
    default:
      return new ComfyUiDialect(parts);
  }
}

/** What a dialect offers besides jobs and files. */
export interface DialectOffers {
  /** The server's node definitions (`/api/object_info`): the submit dialog's form, checks, UI-format conversion. */
  nodeDefinitions: boolean;
  /** Workflows saved on the server (ComfyUI's user data). */
  savedWorkflows: boolean;
}

const OFFERS: Record<DialectName, DialectOffers> = {
  comfyui: { nodeDefinitions: true, savedWorkflows: true },
  'comfy-api-v2': { nodeDefinitions: false, savedWorkflows: false },
};

export function offersOf(name: DialectName): DialectOffers {
  return OFFERS[name] ?? OFFERS.comfyui;
}

/** The sentence for a request the dialect cannot answer (invalid_input: a setting to change, not a fault). */
export function notOffered(name: DialectName, what: keyof DialectOffers): ServiceError {
  const sentences: Record<keyof DialectOffers, string> = {
    nodeDefinitions:
      'this server speaks Comfy API v2, which offers no node definitions: give the workflow in API format (in ComfyUI: Workflow, Export (API)), and leave "check the workflow" off',
    savedWorkflows:
      'this server speaks Comfy API v2, which keeps no saved workflows: paste the workflow (API format) into the submit node, or send it in msg.payload',
  };
  return new ServiceError(
    'invalid_input',
    name === 'comfyui' ? `the server offers no ${what}` : sentences[what],
  );
}
