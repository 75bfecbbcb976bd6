/**
 * Reading one node definition of object_info (GET /api/object_info -> {ClassName: definition}) the way the
 * graph editor does when it builds a node: which inputs it has, in which order, which of them are widgets
 * (values kept in `widgets_values`) and which are sockets only. Pure functions, no I/O.
 */
import { isRecord } from '../../boundary/json-values';
import { ownValue, textOf } from '../../boundary/outside';

export interface InputSpec {
  name: string;
  /** 'INT' | 'FLOAT' | 'STRING' | 'BOOLEAN' | 'COMBO' for value inputs; any other type (MODEL, IMAGE, LATENT, ...) is link-only. */
  type: string;
  /** A value input (a widget in the graph editor); false for link-only types. */
  widget: boolean;
  required: boolean;
  /** COMBO choices: both forms `[["a","b"], {...}]` and `["COMBO", {options: ["a","b"]}]` are read. */
  options?: unknown[];
  default?: unknown;
  min?: number;
  max?: number;
  step?: number;
  multiline?: boolean;
  /** True when the definition asks for control_after_generate (seed, noise_seed): the graph editor saves one
   *  extra widget value ("randomize", "fixed", ...) right after this input's value. */
  controlAfterGenerate: boolean;
}

/** The input types the graph editor shows as widgets. */
const WIDGET_TYPES = new Set(['INT', 'FLOAT', 'STRING', 'BOOLEAN', 'COMBO']);

/**
 * INT inputs with these names get a control_after_generate widget even when the definition does not ask for
 * one: the graph editor keeps this legacy convention (its useIntWidget), so their saved values have the
 * extra entry too.
 */
const LEGACY_SEED_NAMES = new Set(['seed', 'noise_seed']);

function numberOrUndefined(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) ? value : undefined;
}

/** One input of a definition: `[type, options?]`, where type is a name or (old COMBO form) the list of choices. */
function inputSpecOf(name: string, spec: unknown, required: boolean): InputSpec {
  const entry = Array.isArray(spec) ? spec : [spec];
  const [rawType, rawOptions] = entry;
  const options = isRecord(rawOptions) ? rawOptions : {};
  let type: string;
  let choices: unknown[] | undefined;
  if (Array.isArray(rawType)) {
    type = 'COMBO';
    choices = rawType;
  } else {
    type = textOf(rawType, 200) ?? '*';
    if (type === 'COMBO') choices = Array.isArray(options.options) ? options.options : [];
  }
  // forceInput turns a value type into a socket without a widget (the editor draws no widget for it).
  const widget = WIDGET_TYPES.has(type) && options.forceInput !== true;
  const asked = options.control_after_generate;
  const controlAfterGenerate =
    widget &&
    (asked !== undefined && asked !== null ? asked !== false : type === 'INT' && LEGACY_SEED_NAMES.has(name));
  const result: InputSpec = { name, type, widget, required, controlAfterGenerate };
  if (choices !== undefined) result.options = choices;
  if (Object.hasOwn(options, 'default')) result.default = options.default;
  const min = numberOrUndefined(options.min);
  const max = numberOrUndefined(options.max);
  const step = numberOrUndefined(options.step);
  if (min !== undefined) result.min = min;
  if (max !== undefined) result.max = max;
  if (step !== undefined) result.step = step;
  if (typeof options.multiline === 'boolean') result.multiline = options.multiline;
  return result;
}

/** The names of one section (`required` or `optional`) in `input_order` order, then any it does not list. */
function orderedNames(section: Record<string, unknown>, order: unknown): string[] {
  const names = Object.keys(section);
  if (!Array.isArray(order)) return names;
  const listed = order.filter(
    (name): name is string => typeof name === 'string' && Object.hasOwn(section, name),
  );
  return [...new Set([...listed, ...names])];
}

/** The inputs of a definition in the graph editor's order (input_order when present, else required then optional). */
export function inputSpecsOf(definition: unknown): InputSpec[] {
  if (!isRecord(definition) || !isRecord(definition.input)) return [];
  const inputOrder = isRecord(definition.input_order) ? definition.input_order : {};
  const specs: InputSpec[] = [];
  const seen = new Set<string>();
  // Hidden inputs (prompt, extra_pnginfo, unique_id) are filled in by the server: never in a workflow.
  for (const section of ['required', 'optional'] as const) {
    const inputs = definition.input[section];
    if (!isRecord(inputs)) continue;
    for (const name of orderedNames(inputs, ownValue(inputOrder, section))) {
      if (seen.has(name)) continue;
      seen.add(name);
      specs.push(inputSpecOf(name, inputs[name], section === 'required'));
    }
  }
  return specs;
}

/** The name the graph editor gives a node of this class: its display_name, else the class name. */
export function displayNameOf(definition: unknown, classType: string): string {
  if (isRecord(definition) && typeof definition.display_name === 'string' && definition.display_name) {
    return definition.display_name;
  }
  return classType;
}

/** The output types of a definition, in slot order. */
export function outputTypesOf(definition: unknown): string[] {
  if (!isRecord(definition) || !Array.isArray(definition.output)) return [];
  return definition.output.map((type) => (Array.isArray(type) ? 'COMBO' : (textOf(type, 200) ?? '*')));
}
