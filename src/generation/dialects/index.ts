/**
 * The dialects a config node can speak, by name: the one place that chooses. No Node-RED inside.
 */
import { ComfyApiV2Dialect } from './comfy-api-v2/comfy-api-v2-dialect';
import { ComfyUiDialect } from './comfyui/comfyui-dialect';
import type { DialectName, DialectParts, ServerDialect } from './dialect';

export function createDialect(name: DialectName, parts: DialectParts): ServerDialect {
  switch (name) {
    case 'comfy-api-v2':
      return new ComfyApiV2Dialect(parts);
    default:
      return new ComfyUiDialect(parts);
  }
}
