/**
 * Workflows in API format (node id -> {class_type, inputs}): reading them from a message or a setting,
 * applying per-message input overrides on a copy, and refusing broken ones before anything is sent, with
 * errors that name the node and the input. Pure functions, no I/O.
 */
import { invalidInput } from '../http/errors';

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

function isRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
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
      if (isLink(inputValue) && !(String(inputValue[0]) in value)) {
        throw invalidInput(
          `Input "${input}" of node "${id}" links to node "${inputValue[0]}", which is not in the workflow`,
        );
      }
    }
  }
  return value as Workflow;
}

/** A deep copy of the workflow with the overrides applied (the template is never changed). */
export function applyOverrides(workflow: Workflow, overrides: unknown): Workflow {
  const copy = structuredClone(workflow);
  if (overrides === undefined || overrides === null) return copy;
  if (!isRecord(overrides)) {
    throw invalidInput('msg.inputs must be an object: {"<node id>": {"<input>": value}}');
  }
  for (const [id, inputs] of Object.entries(overrides)) {
    const node = copy[id];
    if (!node) {
      throw invalidInput(
        `msg.inputs sets node "${id}", which is not in the workflow (its nodes: ${Object.keys(copy).join(', ')})`,
      );
    }
    if (!isRecord(inputs)) throw invalidInput(`msg.inputs["${id}"] must be an object of input values`);
    for (const [input, inputValue] of Object.entries(inputs)) {
      node.inputs[input] = structuredClone(inputValue);
    }
  }
  return copy;
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
    const missing = Object.keys(definition.input?.required ?? {}).filter((input) => !(input in node.inputs));
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
