/**
 * The dialects a config node can speak, by name: the one place that chooses. No Node-RED inside.
 */
import { ComfyUiDialect } from './comfyui/comfyui-dialect';
import type { DialectName, DialectParts, ServerDialect } from './dialect';

export function createDialect(name: DialectName, parts: DialectParts): ServerDialect {
  switch (name) {
    case 'comfy-api-v2':
      throw new Error('Comfy API v2 is not built yet');
    default:
      return new ComfyUiDialect(parts);
  }
}
