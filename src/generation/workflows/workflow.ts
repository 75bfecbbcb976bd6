/**
 * Workflows in API format (node id -> {class_type, inputs, _meta: {title}}): reading them from a message or
 * a setting, applying per-message input overrides (keyed by node id or title) on a copy, new seeds, and
 * refusing broken ones before anything is sent, with errors that name the node and the input. Pure
 * functions, no I/O.
 */
import { randomBytes, randomInt } from 'node:crypto';
import { invalidInput } from '../../http/errors';
import { inputSpecsOf } from './node-definitions';
import { isRecord } from '../../boundary/json-values';
import { ownValue, setOwn } from '../../boundary/outside';

export interface WorkflowNode {
  class_type?: string;
  inputs: Record<string, unknown>;
  [field: string]: unknown;
}

export type Workflow = Record<string, WorkflowNode>;

/** node id -> input name -> value. */
export type InputOverrides = Record<string, Record<string, unknown>>;

/** What object_info says about one node type (only what validation needs). */
export interface NodeTypeDefinition {
  input?: { required?: Record<string, unknown>; optional?: Record<string, unknown> };
  api_node?: boolean;
}

/** A workflow from an object or JSON text; undefined when the value is neither (so a setting may be used). */
export function readWorkflow(value: unknown): unknown {
  if (typeof value === 'string') {
    const text = value.trim();
    if (!text.startsWith('{')) return undefined;
    try {
      return JSON.parse(text);
    } catch (error) {
      throw invalidInput(
        `The workflow is not valid JSON (${(error as Error).message}): export it in API format`,
      );
    }
  }
  if (isRecord(value) && !Buffer.isBuffer(value)) return value;
  return undefined;
}

/** Whether a value looks like an API-format workflow: an object whose values are objects with `inputs`. */
export function looksLikeWorkflow(value: unknown): boolean {
  if (!isRecord(value)) return false;
  const nodes = Object.values(value);
  return (
    nodes.length > 0 && nodes.every((node) => isRecord(node) && ('inputs' in node || 'class_type' in node))
  );
}

/** A link is `[source node id, output index]`. */
function isLink(value: unknown): value is [string, number] {
  return (
    Array.isArray(value) &&
    value.length === 2 &&
    (typeof value[0] === 'string' || typeof value[0] === 'number') &&
    Number.isInteger(value[1])
  );
}

/** Checks the shape and links of a workflow; throws invalid_input naming the node and input. */
export function validateWorkflow(value: unknown): Workflow {
  if (!isRecord(value)) {
    throw invalidInput(
      'The workflow is not an object of nodes: give an API-format workflow (node id -> {class_type, inputs})',
    );
  }
  const ids = Object.keys(value);
  if (ids.length === 0) throw invalidInput('The workflow has no nodes');
  for (const id of ids) {
    const node: unknown = value[id];
    if (!isRecord(node)) throw invalidInput(`Node "${id}" of the workflow is not an object`);
    if (!isRecord(node.inputs)) {
      throw invalidInput(
        `Node "${id}"${typeof node.class_type === 'string' ? ` (${node.class_type})` : ''} has no inputs object: export the workflow in API format`,
      );
    }
    if (node.class_type !== undefined && typeof node.class_type !== 'string') {
      throw invalidInput(`Node "${id}" has a class_type that is not text`);
    }
    for (const [input, inputValue] of Object.entries(node.inputs as Record<string, unknown>)) {
      if (isLink(inputValue) && !Object.hasOwn(value, String(inputValue[0]))) {
        throw invalidInput(
          `Input "${input}" of node "${id}" links to node "${inputValue[0]}", which is not in the workflow`,
        );
      }
    }
  }
  return value as Workflow;
}

/** A node's title: `_meta.title`, as the graph editor's "Export (API)" writes it. */
export function titleOf(node: WorkflowNode): string | undefined {
  const meta = node._meta;
  const title = isRecord(meta) ? meta.title : undefined;
  return typeof title === 'string' && title !== '' ? title : undefined;
}

/** The workflow's nodes for a sentence: `3 (KSampler), 6 "Positive prompt", ...`. */
function nodeList(workflow: Workflow): string {
  return Object.entries(workflow)
    .map(([id, node]) => {
      const title = titleOf(node);
      return title !== undefined
        ? `${id} "${title}"`
        : `${id}${node.class_type ? ` (${node.class_type})` : ''}`;
    })
    .join(', ');
}

/**
 * msg.inputs with every key made a node id: a key that is a node id of the workflow is that node; any
 * other key is a node title (`_meta.title`). A title that several nodes carry is refused naming their ids;
 * a key that is neither is refused listing the workflow's ids and titles. Two keys for one node merge.
 */
export function resolveOverrides(workflow: Workflow, overrides: unknown): InputOverrides {
  if (overrides === undefined || overrides === null) return {};
  if (!isRecord(overrides)) {
    throw invalidInput('msg.inputs must be an object: {"<node id or title>": {"<input>": value}}');
  }
  const resolved: InputOverrides = {};
  for (const [key, inputs] of Object.entries(overrides)) {
    let id = key;
    if (!Object.hasOwn(workflow, key)) {
      const titled = Object.keys(workflow).filter((candidate) => titleOf(workflow[candidate]) === key);
      if (titled.length > 1) {
        throw invalidInput(
          `msg.inputs sets "${key}", a title that ${titled.length} nodes carry (ids ${titled.join(', ')}): use the id of the one you mean, or give the nodes different titles`,
        );
      }
      if (titled.length === 0) {
        throw invalidInput(
          `msg.inputs sets node "${key}", which is not in the workflow: neither a node id nor a node title (its nodes: ${nodeList(workflow)})`,
        );
      }
      id = titled[0];
    }
    if (!isRecord(inputs)) throw invalidInput(`msg.inputs["${key}"] must be an object of input values`);
    // Node ids are words of the workflow: __proto__ is a node id like any other, kept as an own key.
    setOwn(resolved, id, { ...(ownValue(resolved, id) as InputOverrides[string] | undefined), ...inputs });
  }
  return resolved;
}

/** A deep copy of the workflow with the overrides (keyed by node id or title) applied; the template is never changed. */
export function applyOverrides(workflow: Workflow, overrides: unknown): Workflow {
  return applyResolvedOverrides(workflow, resolveOverrides(workflow, overrides));
}

/** The same, for overrides `resolveOverrides` already keyed by node id (the submit node keeps them for seeds). */
export function applyResolvedOverrides(workflow: Workflow, resolved: InputOverrides): Workflow {
  const copy = structuredClone(workflow);
  for (const [id, inputs] of Object.entries(resolved)) {
    for (const [input, inputValue] of Object.entries(inputs)) {
      setOwn(copy[id].inputs, input, structuredClone(inputValue));
    }
  }
  return copy;
}

/** An input that takes a new random value per message, and the range of that value. */
export interface SeedInput {
  id: string;
  input: string;
  min: number;
  max: number;
}

/** node id -> the value used; for a node with several seed inputs, input name -> value. */
export type SeedValues = Record<string, number | Record<string, number>>;

/** Input names taken for seeds when the node definitions cannot be read. */
const SEED_NAMES = new Set(['seed', 'noise_seed']);

/** A seed range JSON numbers hold exactly: a server's 2^64 - 1 is not one. */
function seedRange(min: number | undefined, max: number | undefined): { min: number; max: number } {
  const low = Math.max(Math.ceil(min ?? 0), -Number.MAX_SAFE_INTEGER);
  const high = Math.min(Math.floor(max ?? Number.MAX_SAFE_INTEGER), Number.MAX_SAFE_INTEGER);
  return high >= low ? { min: low, max: high } : { min: low, max: low };
}

/**
 * The seed inputs of a workflow: INT inputs whose definition asks for control_after_generate (`seed`,
 * `noise_seed`), where the node holds a number (an input linked to another node is left alone). Nodes whose
 * type has no definition have none.
 */
export function seedInputsOf(workflow: Workflow, definitionOf: (classType: string) => unknown): SeedInput[] {
  const seeds: SeedInput[] = [];
  for (const [id, node] of Object.entries(workflow)) {
    if (typeof node.class_type !== 'string') continue;
    const definition = definitionOf(node.class_type);
    if (definition === undefined) continue;
    for (const spec of inputSpecsOf(definition)) {
      if (spec.type !== 'INT' || !spec.controlAfterGenerate || typeof node.inputs[spec.name] !== 'number')
        continue;
      seeds.push({ id, input: spec.name, ...seedRange(spec.min, spec.max) });
    }
  }
  return seeds;
}

/** Without node definitions: number inputs named `seed` or `noise_seed`, over 0 to 2^53 - 1. */
export function seedInputsByName(workflow: Workflow): SeedInput[] {
  const seeds: SeedInput[] = [];
  for (const [id, node] of Object.entries(workflow)) {
    for (const [input, value] of Object.entries(node.inputs)) {
      if (SEED_NAMES.has(input) && typeof value === 'number')
        seeds.push({ id, input, ...seedRange(0, undefined) });
    }
  }
  return seeds;
}

/** 64 random bits. */
function randomBits(): bigint {
  return randomBytes(8).readBigUInt64BE();
}

/**
 * A uniform random whole number in [min, max], both safe integers (up to 2^54 - 1 values: crypto's randomInt
 * stops at 2^48). Wide ranges are counted in BigInt: their size, up to 2^54 - 1, is not a safe integer, and
 * rounding it would let a draw land past `max`. `bits` gives 64 random bits (tests pick them).
 */
export function randomSeed(min: number, max: number, bits: () => bigint = randomBits): number {
  const count = max - min + 1;
  if (count < 2 ** 48) return min + randomInt(count);
  const span = BigInt(max) - BigInt(min) + 1n;
  // Rejection keeps it uniform: 64 random bits, minus the top remainder that would favour small values.
  const limit = 2n ** 64n - (2n ** 64n % span);
  for (;;) {
    const drawn = bits();
    if (drawn < limit) return Number(BigInt(min) + (drawn % span));
  }
}

/**
 * Gives each seed input a fresh random value in its range, except those msg.inputs set (`kept`, keyed by
 * node id), in the workflow (a copy) itself; returns the values used by every seed input, set or kept.
 */
export function applyNewSeeds(
  workflow: Workflow,
  seeds: SeedInput[],
  kept: InputOverrides,
  random: (min: number, max: number) => number = randomSeed,
): SeedValues {
  const used = new Map<string, Record<string, number>>();
  for (const seed of seeds) {
    const inputs = workflow[seed.id].inputs;
    const keptInputs = ownValue(kept, seed.id) as InputOverrides[string] | undefined;
    if (!(keptInputs && Object.hasOwn(keptInputs, seed.input))) {
      setOwn(inputs, seed.input, random(seed.min, seed.max));
    }
    const value = inputs[seed.input];
    if (typeof value !== 'number') continue;
    used.set(seed.id, { ...used.get(seed.id), [seed.input]: value });
  }
  const values: SeedValues = {};
  for (const [id, inputs] of used) {
    const names = Object.keys(inputs);
    setOwn(values, id, names.length === 1 ? inputs[names[0]] : inputs);
  }
  return values;
}

/**
 * Checks node types and required inputs against object_info. `definitionOf` returns undefined for an
 * unknown type. Throws invalid_input naming every broken node and input.
 */
export function checkAgainstDefinitions(
  workflow: Workflow,
  definitionOf: (classType: string) => NodeTypeDefinition | undefined,
): void {
  const problems: string[] = [];
  for (const [id, node] of Object.entries(workflow)) {
    if (typeof node.class_type !== 'string') {
      problems.push(`node "${id}" has no class_type`);
      continue;
    }
    const definition = definitionOf(node.class_type);
    if (!definition) {
      problems.push(`node "${id}" is of type ${node.class_type}, which the service does not have`);
      continue;
    }
    const required = isRecord(definition.input) ? definition.input.required : undefined;
    const missing = Object.keys(isRecord(required) ? required : {}).filter(
      (input) => !Object.hasOwn(node.inputs, input),
    );
    for (const input of missing)
      problems.push(`node "${id}" (${node.class_type}) lacks required input "${input}"`);
  }
  if (problems.length > 0) {
    throw invalidInput(`The workflow does not match the service's node definitions: ${problems.join('; ')}`);
  }
}

/** The class types a workflow uses. */
export function classTypesOf(workflow: Workflow): string[] {
  return [
    ...new Set(
      Object.values(workflow)
        .map((node) => node.class_type)
        .filter((t) => typeof t === 'string'),
    ),
  ] as string[];
}

interface NodeErrorEntry {
  errors?: Array<{ message?: string; details?: string; extra_info?: { input_name?: string } }>;
  class_type?: string;
}

/**
 * One sentence naming each failing node and input of a submit answer (`node_errors` and/or `error`), or
 * undefined when the answer reports no problem.
 */
export function describeSubmitProblems(body: unknown): string | undefined {
  if (!isRecord(body)) return undefined;
  const parts: string[] = [];
  const nodeErrors = isRecord(body.node_errors) ? body.node_errors : {};
  for (const [id, entry] of Object.entries(nodeErrors)) {
    // Any shape may come back: an entry, or its errors, that are not what the spec says are skipped.
    const record = isRecord(entry) ? (entry as NodeErrorEntry) : {};
    const classType = typeof record.class_type === 'string' ? record.class_type : undefined;
    const errors = Array.isArray(record.errors) ? record.errors.filter(isRecord) : [];
    const details = errors.map((error) => {
      const extra = isRecord(error.extra_info) ? error.extra_info : {};
      const input = [extra.input_name, error.details].find((part) => typeof part === 'string' && part);
      const message = typeof error.message === 'string' ? error.message : undefined;
      return [message, input ? `"${input}"` : undefined].filter(Boolean).join(' ');
    });
    parts.push(`node "${id}"${classType ? ` (${classType})` : ''}: ${details.join('; ') || 'invalid'}`);
  }
  const error = body.error;
  let headline: string | undefined;
  if (typeof error === 'string') headline = error;
  else if (isRecord(error)) {
    headline = [error.message, error.details].filter((part) => typeof part === 'string' && part).join(': ');
  }
  const hasError = error !== undefined && error !== null && error !== '' && error !== false;
  if (parts.length === 0 && !hasError) return undefined;
  const summary = headline || 'the service refused the workflow';
  return parts.length > 0 ? `${summary} (${parts.join('; ')})` : summary;
}
