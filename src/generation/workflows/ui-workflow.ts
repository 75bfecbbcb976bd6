/**
 * UI-format workflows (what the graph editor saves: `nodes` and `links` arrays) converted to API format
 * (node id -> {class_type, inputs, _meta}) with the server's node definitions, the way the graph editor's own
 * "Export (API)" and queueing do it (ComfyUI frontend 1.35, shipped with ComfyUI v0.8.0: graphToPrompt and
 * ExecutableNodeDTO). What cannot be converted is refused with a sentence naming the node. Pure, no I/O.
 * Past 400 lines: one algorithm (widget values, links through Reroutes, PrimitiveNodes and bypassed nodes)
 * whose steps share the workflow's node and link maps; dynamic prompts live in dynamic-prompt.ts.
 */
import { invalidInput } from '../../http/errors';
import { resolveDynamicPrompt } from './dynamic-prompt';
import { displayNameOf, inputSpecsOf, type InputSpec } from './node-definitions';
import type { Workflow, WorkflowNode } from './workflow';
import { isRecord } from '../../boundary/json-values';
import { ownValue, setOwn, textOf } from '../../boundary/outside';

/** Node modes the editor saves: 0 always, 1 on event, 3 on trigger (all run), 2 never (muted), 4 bypass. */
const MODE_MUTED = 2;
const MODE_BYPASSED = 4;

/** Editor-only classes: they never reach the server. */
const NOTE_TYPES = new Set(['Note', 'MarkdownNote']);
const REROUTE_TYPE = 'Reroute';
const PRIMITIVE_TYPE = 'PrimitiveNode';

/**
 * The editor adds an "upload" button widget after the required inputs of nodes that load a file; its value
 * ("image") is saved in widgets_values though never sent. These classes get it even without the flag.
 */
const UPLOAD_FLAGS = ['image_upload', 'video_upload', 'animated_image_upload'];
const UPLOAD_FALLBACK_CLASSES = new Set(['LoadImage', 'LoadImageMask', 'LoadVideo']);

interface UiInput {
  name: string;
  type: string;
  link: string | undefined;
}

interface UiOutput {
  type: string;
}

interface UiNode {
  id: string;
  type: string;
  mode: number;
  title: string | undefined;
  inputs: UiInput[];
  outputs: UiOutput[];
  widgetsValues: unknown;
}

interface UiLink {
  originId: string;
  originSlot: number;
  type: string;
}

/** Where an input's link leads once Reroutes, PrimitiveNodes and bypassed nodes are seen through. */
type Source =
  | { kind: 'output'; nodeId: string; slot: number }
  | { kind: 'value'; value: unknown }
  | { kind: 'muted'; nodeId: string }
  | { kind: 'nothing'; why: string };

/** One hop back along a link: where it ends, or the next link to follow. */
type Step = Source | { kind: 'follow'; linkId: string; type: string };

export interface ConvertOptions {
  /** Chooses among `{a|b}` options of dynamic-prompt text (Math.random by default, as the editor does). */
  random?: () => number;
}

function idText(value: unknown): string | undefined {
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  if (typeof value === 'string' && value !== '') return value;
  return undefined;
}

/** Editor-only nodes (notes, reroutes, primitives): never sent, never in object_info. */
function isEditorOnly(type: string): boolean {
  return NOTE_TYPES.has(type) || type === REROUTE_TYPE || type === PRIMITIVE_TYPE;
}

/**
 * The server's class types a UI-format workflow names (its nodes' `type`), without the editor's own: what
 * to read definitions for. Asking for an editor-only type would be a miss, and a miss re-reads object_info.
 */
export function uiClassTypes(ui: unknown): string[] {
  const nodes = isRecord(ui) && Array.isArray(ui.nodes) ? ui.nodes : [];
  const types = nodes.map((node) => (isRecord(node) ? node.type : undefined));
  return [
    ...new Set(types.filter((type): type is string => typeof type === 'string' && !isEditorOnly(type))),
  ];
}

/** Whether a value is a UI-format workflow (as the graph editor saves it: `nodes` and `links` arrays). */
export function isUiWorkflow(value: unknown): boolean {
  return isRecord(value) && Array.isArray(value.nodes) && Array.isArray(value.links);
}

function readNode(raw: unknown, index: number): UiNode {
  if (!isRecord(raw)) throw invalidInput(`Entry ${index} of the workflow's nodes is not an object`);
  const id = idText(raw.id);
  if (id === undefined) throw invalidInput(`Entry ${index} of the workflow's nodes has no id`);
  if (typeof raw.type !== 'string' || raw.type === '') {
    throw invalidInput(`Node "${id}" of the workflow has no type`);
  }
  const inputs = (Array.isArray(raw.inputs) ? raw.inputs : []).filter(isRecord).map((input) => ({
    name: typeof input.name === 'string' ? input.name : '',
    type: textOf(input.type, 200) ?? '*',
    link: idText(input.link),
  }));
  const outputs = (Array.isArray(raw.outputs) ? raw.outputs : []).map((output) => ({
    type: isRecord(output) && typeof output.type === 'string' ? output.type : '*',
  }));
  return {
    id,
    type: raw.type,
    mode: typeof raw.mode === 'number' ? raw.mode : 0,
    title: typeof raw.title === 'string' && raw.title !== '' ? raw.title : undefined,
    inputs,
    outputs,
    widgetsValues: raw.widgets_values,
  };
}

/** Links are `[id, origin_id, origin_slot, target_id, target_slot, type]`, or objects in newer files. */
function readLinks(raw: unknown[]): Map<string, UiLink> {
  const links = new Map<string, UiLink>();
  for (const entry of raw) {
    const [id, originId, originSlot, type] = Array.isArray(entry)
      ? [entry[0], entry[1], entry[2], entry[5]]
      : isRecord(entry)
        ? [entry.id, entry.origin_id, entry.origin_slot, entry.type]
        : [];
    const linkId = idText(id);
    const origin = idText(originId);
    if (linkId === undefined || origin === undefined) continue;
    links.set(linkId, {
      originId: origin,
      // Never Number() of an unchecked value: an array or object may hold one whose own toString throws.
      originSlot: Number(textOf(originSlot, 20)) || 0,
      type: typeof type === 'string' ? type : '*',
    });
  }
  return links;
}

/** The raw options object of one input of a definition (for flags InputSpec does not carry). */
function rawOptionsOf(definition: unknown, name: string): Record<string, unknown> {
  if (!isRecord(definition) || !isRecord(definition.input)) return {};
  for (const section of ['required', 'optional']) {
    const inputs = definition.input[section];
    const input = isRecord(inputs) ? ownValue(inputs, name) : undefined;
    if (Array.isArray(input) && isRecord(input[1])) return input[1];
  }
  return {};
}

/** The value a widget starts with when widgets_values has none for it (the editor's defaults). */
function defaultValueOf(spec: InputSpec): unknown {
  if (spec.default !== undefined) return spec.default;
  switch (spec.type) {
    case 'INT':
    case 'FLOAT':
      return 0;
    case 'STRING':
      return '';
    case 'BOOLEAN':
      return false;
    default:
      return spec.options?.[0];
  }
}

/**
 * The widget values of a node by input name. widgets_values holds one entry per widget in the editor's order:
 * each value input, the extra control value after a seed (two for a combo: control and filter), and the upload
 * button's value after the required inputs of file loaders. Files saved before frontend 1.16 also hold a dummy
 * entry for each forceInput input, which the editor drops when the count says so; so is it here.
 */
function widgetValuesOf(node: UiNode, definition: unknown, specs: InputSpec[]): Map<string, unknown> {
  const values = new Map<string, unknown>();
  const saved = node.widgetsValues;
  if (isRecord(saved)) {
    // Some nodes save their widgets by name.
    for (const spec of specs) {
      if (spec.widget) {
        values.set(spec.name, Object.hasOwn(saved, spec.name) ? saved[spec.name] : defaultValueOf(spec));
      }
    }
    return values;
  }
  const list = Array.isArray(saved) ? saved : [];
  const hasUpload =
    UPLOAD_FALLBACK_CLASSES.has(node.type) ||
    specs.some(
      (spec) =>
        spec.required &&
        spec.type === 'COMBO' &&
        UPLOAD_FLAGS.some((flag) => rawOptionsOf(definition, spec.name)[flag] === true),
    );
  const build = (withForcedInputs: boolean): Array<InputSpec | undefined> => {
    const slots: Array<InputSpec | undefined> = [];
    const lastRequired = specs.reduce((last, spec, index) => (spec.required ? index : last), -1);
    specs.forEach((spec, index) => {
      const forced = !spec.widget && ['INT', 'FLOAT', 'STRING', 'BOOLEAN', 'COMBO'].includes(spec.type);
      if (spec.widget) slots.push(spec);
      else if (forced && withForcedInputs) slots.push(undefined);
      if (spec.widget && spec.controlAfterGenerate) {
        slots.push(undefined);
        if (spec.type === 'COMBO') slots.push(undefined);
      }
      if (hasUpload && index === lastRequired) slots.push(undefined);
    });
    return slots;
  };
  const current = build(false);
  const legacy = build(true);
  const slots = legacy.length !== current.length && list.length === legacy.length ? legacy : current;
  slots.forEach((spec, index) => {
    if (!spec) return;
    values.set(
      spec.name,
      list[index] !== undefined && list[index] !== null ? list[index] : defaultValueOf(spec),
    );
  });
  return values;
}

/** LiteGraph's type check: `*` and empty match anything; `A,B` lists match when they share a type. */
function typesConnect(a: string, b: string): boolean {
  const anyType = (type: string) => type === '' || type === '*' || type === '0';
  if (anyType(a) || anyType(b) || a === b) return true;
  const left = a.toLowerCase().split(',');
  const right = b.toLowerCase().split(',');
  return left.some((one) => right.includes(one));
}

/**
 * The input a bypassed node passes to its output `slot` for a target of `type`: the input at the same index
 * when its type fits, else the first input of exactly that type, else the first that connects.
 */
function bypassInputIndex(inputs: UiInput[], outputType: string, slot: number, type: string): number {
  if (type === '*' || type === '') return inputs.length > slot ? slot : 0;
  const opposite = inputs[slot];
  if (opposite && typesConnect(opposite.type, outputType) && typesConnect(opposite.type, type)) return slot;
  const exact = inputs.findIndex((input) => input.type === type);
  if (exact !== -1) return exact;
  return inputs.findIndex((input) => typesConnect(input.type, outputType) && typesConnect(input.type, type));
}

/** `node "5" (ImageBlur)`, or `node "5" ("My blur", ImageBlur)` when it has its own title. */
function describeNode(node: UiNode): string {
  return node.title && node.title !== node.type
    ? `node "${node.id}" ("${node.title}", ${node.type})`
    : `node "${node.id}" (${node.type})`;
}

/** The API-format workflow (node id -> {class_type, inputs, _meta: {title}}) of a UI-format one; throws
 *  invalid_input (src/http/errors.ts invalidInput) with a sentence naming the node that cannot be converted. */
export function convertUiWorkflow(
  ui: unknown,
  definitionOf: (classType: string) => unknown | undefined,
  options: ConvertOptions = {},
): Workflow {
  if (!isUiWorkflow(ui)) {
    throw invalidInput(
      'The workflow is not in the graph editor\'s format (an object with "nodes" and "links" arrays)',
    );
  }
  const random = options.random ?? Math.random;
  const record = ui as { nodes: unknown[]; links: unknown[]; extra?: unknown; definitions?: unknown };
  const nodes = new Map<string, UiNode>();
  record.nodes.forEach((raw, index) => {
    const node = readNode(raw, index);
    if (nodes.has(node.id)) throw invalidInput(`The workflow has two nodes with id "${node.id}"`);
    nodes.set(node.id, node);
  });
  const links = readLinks(record.links);
  const groupNodeNames = new Set(
    isRecord(record.extra) && isRecord(record.extra.groupNodes) ? Object.keys(record.extra.groupNodes) : [],
  );
  const subgraphIds = new Set(
    isRecord(record.definitions) && Array.isArray(record.definitions.subgraphs)
      ? record.definitions.subgraphs
          .filter(isRecord)
          .map((subgraph) => textOf(subgraph.id))
          .filter((id) => id !== undefined)
      : [],
  );

  const problems: string[] = [];
  const definitions = new Map<string, unknown>();
  for (const node of nodes.values()) {
    if (isEditorOnly(node.type)) continue;
    if (subgraphIds.has(node.type)) {
      const named = node.title ? `node "${node.id}" ("${node.title}")` : `node "${node.id}"`;
      problems.push(
        `${named} is a subgraph, which cannot be converted: unpack it in the graph editor (right-click > Unpack Subgraph) and save the workflow again`,
      );
      continue;
    }
    if (
      node.type.startsWith('workflow>') ||
      node.type.startsWith('workflow/') ||
      groupNodeNames.has(node.type)
    ) {
      problems.push(
        `${describeNode(node)} is a group node, which cannot be converted: turn it back into its nodes in the graph editor (right-click > Convert to nodes) and save the workflow again`,
      );
      continue;
    }
    const definition = definitionOf(node.type);
    if (definition !== undefined && definition !== null) {
      definitions.set(node.id, definition);
    } else if (node.mode !== MODE_MUTED && node.mode !== MODE_BYPASSED) {
      problems.push(
        `${describeNode(node)} is of class ${node.type}, which the service does not have: install the custom nodes that provide it, or remove the node`,
      );
    }
  }
  if (problems.length > 0) throw refusal(problems);

  /**
   * The inputs of a bypassed node as the editor holds them in memory: one per input of its definition (every
   * widget has a socket), linked where the saved file says so; saved inputs the definition lacks follow.
   */
  const liveInputsOf = (node: UiNode): UiInput[] => {
    const definition = definitions.get(node.id);
    if (definition === undefined) return node.inputs;
    const byName = new Map(node.inputs.map((input) => [input.name, input]));
    const live: UiInput[] = inputSpecsOf(definition).map((spec) => ({
      name: spec.name,
      type: byName.get(spec.name)?.type ?? spec.type,
      link: byName.get(spec.name)?.link,
    }));
    const known = new Set(live.map((input) => input.name));
    return [...live, ...node.inputs.filter((input) => !known.has(input.name))];
  };

  /**
   * One hop back along a link from the output `slot` of `nodeId`: where it ends, or the link to follow next
   * (through a Reroute, or the input a bypassed node passes on). `visited` holds the outputs passed so far.
   */
  const stepBack = (nodeId: string, slot: number, type: string, visited: Set<string>): Step => {
    const origin = nodes.get(nodeId);
    if (!origin)
      return { kind: 'nothing', why: `it links to node "${nodeId}", which is not in the workflow` };
    const key = `${nodeId}:${slot}`;
    if (visited.has(key)) {
      return { kind: 'nothing', why: `its link goes round in a circle through ${describeNode(origin)}` };
    }
    visited.add(key);
    if (origin.type === PRIMITIVE_TYPE) {
      const saved = origin.widgetsValues;
      return Array.isArray(saved) && saved.length > 0
        ? { kind: 'value', value: saved[0] }
        : { kind: 'nothing', why: `${describeNode(origin)} holds no value` };
    }
    if (origin.type === REROUTE_TYPE) {
      // A Reroute passes its one input on whatever its mode (the editor ignores it there too).
      const input = origin.inputs[0];
      return input?.link !== undefined
        ? { kind: 'follow', linkId: input.link, type }
        : { kind: 'nothing', why: `${describeNode(origin)} has nothing connected to it` };
    }
    if (origin.mode === MODE_BYPASSED) {
      const inputs = liveInputsOf(origin);
      const outputType = origin.outputs[slot]?.type ?? type;
      const index = bypassInputIndex(inputs, outputType, slot, type);
      const input = inputs[index];
      if (!input) {
        return {
          kind: 'nothing',
          why: `it comes from bypassed ${describeNode(origin)}, which has no ${type} input to pass on`,
        };
      }
      if (input.link === undefined) {
        return {
          kind: 'nothing',
          why: `it comes from bypassed ${describeNode(origin)}, whose input "${input.name}" is not connected`,
        };
      }
      return { kind: 'follow', linkId: input.link, type: input.type };
    }
    if (origin.mode === MODE_MUTED) return { kind: 'muted', nodeId };
    if (NOTE_TYPES.has(origin.type)) return { kind: 'nothing', why: `it links to ${describeNode(origin)}` };
    return { kind: 'output', nodeId, slot };
  };

  /**
   * Where a link leads for an input of `type`, through any number of Reroutes and bypassed nodes: followed in
   * a loop (a chain of thousands must not overflow the stack), and each link's answer kept, so inputs that
   * share a long chain walk it once (else the work grows with inputs times chain length).
   */
  const followed = new Map<string, Source>();
  const resolveLink = (firstLinkId: string, firstType: string): Source => {
    const walked: string[] = [];
    const visited = new Set<string>();
    let linkId = firstLinkId;
    let type = firstType;
    let source: Source | undefined;
    while (!source) {
      const key = `${linkId}\u0000${type}`;
      source = followed.get(key);
      if (source) break;
      walked.push(key);
      const link = links.get(linkId);
      if (!link) {
        source = { kind: 'nothing', why: `its link ${linkId} is not in the workflow's links` };
        break;
      }
      const step = stepBack(link.originId, link.originSlot, type, visited);
      if (step.kind === 'follow') ({ linkId, type } = step);
      else source = step;
    }
    for (const key of walked) followed.set(key, source);
    return source;
  };

  const workflow: Workflow = {};
  for (const node of nodes.values()) {
    const definition = definitions.get(node.id);
    if (definition === undefined || node.mode === MODE_MUTED || node.mode === MODE_BYPASSED) continue;
    const specs = inputSpecsOf(definition);
    const values = widgetValuesOf(node, definition, specs);
    const sources = new Map<string, Source>();
    for (const input of node.inputs) {
      if (input.link === undefined) continue;
      const source = resolveLink(input.link, input.type);
      sources.set(input.name, source);
      // A PrimitiveNode sets the widget it feeds, which is then sent like any widget value.
      if (source.kind === 'value') values.set(input.name, source.value);
    }
    const inputs: Record<string, unknown> = {};
    for (const spec of specs) {
      let value = values.get(spec.name);
      if (!spec.widget || value === undefined) continue;
      if (typeof value === 'string' && rawOptionsOf(definition, spec.name).dynamicPrompts === true) {
        try {
          value = resolveDynamicPrompt(value, random);
        } catch (error) {
          problems.push(`input "${spec.name}" of ${describeNode(node)}: ${(error as Error).message}`);
          continue;
        }
      }
      // Arrays stand for links in API format: a list value is boxed, and the server unboxes it.
      setOwn(inputs, spec.name, Array.isArray(value) ? { __value__: value } : value);
    }
    for (const [name, source] of sources) {
      if (source.kind === 'output') setOwn(inputs, name, [source.nodeId, source.slot]);
      // The editor sends nothing for an input fed by a muted node.
      else if (source.kind === 'muted') delete inputs[name];
    }
    for (const spec of specs) {
      if (!spec.required || Object.hasOwn(inputs, spec.name)) continue;
      const source = sources.get(spec.name);
      if (source?.kind === 'muted') {
        problems.push(
          `input "${spec.name}" of ${describeNode(node)} comes from muted ${describeNode(nodes.get(source.nodeId) as UiNode)}: unmute that node, or mute this one too`,
        );
      } else if (source?.kind === 'nothing') {
        problems.push(`input "${spec.name}" of ${describeNode(node)} gets nothing: ${source.why}`);
      } else if (!spec.widget) {
        problems.push(`input "${spec.name}" of ${describeNode(node)} is required but not connected`);
      }
    }
    const apiNode: WorkflowNode = {
      inputs,
      class_type: node.type,
      _meta: { title: node.title ?? displayNameOf(definition, node.type) },
    };
    setOwn(workflow, node.id, apiNode);
  }
  if (problems.length > 0) throw refusal(problems);
  return workflow;
}

function refusal(problems: string[]): Error {
  return invalidInput(`The UI-format workflow cannot be converted to API format: ${problems.join('; ')}`);
}
