/**
 * What a workflow needs of a server, and what one server lacks of it: every node class it uses, and every model
 * file its inputs name (a COMBO input whose value is a file with a model's extension, which the server must list
 * among that input's choices). Read from the server's node definitions (object_info), as its dialog shows them.
 * An uploaded image (LoadImage's `image`) is not a model: it is sent to the server that runs the job (the pool's
 * affinity), so it need not be listed yet. Pure functions, no I/O.
 */
import { inputSpecsOf } from '../workflows/node-definitions';
import type { NodeTypeDefinition, Workflow } from '../workflows/workflow';

/** The extensions of model files (checkpoints, LoRAs, VAEs, upscalers, CLIP, ...), as ComfyUI's folders hold them. */
const MODEL_EXTENSIONS = /\.(safetensors|sft|ckpt|pt|pt2|pth|bin|gguf|onnx)$/i;

/** One model file a node's input names. */
export interface ModelNeed {
  classType: string;
  input: string;
  file: string;
}

export interface WorkflowNeeds {
  classTypes: string[];
  models: ModelNeed[];
}

/** The node classes and model files of a workflow (API format). */
export function needsOf(workflow: Workflow): WorkflowNeeds {
  const classTypes = new Set<string>();
  const models: ModelNeed[] = [];
  for (const node of Object.values(workflow)) {
    const classType = node.class_type;
    if (typeof classType !== 'string') continue;
    classTypes.add(classType);
    for (const [input, value] of Object.entries(node.inputs)) {
      if (typeof value === 'string' && MODEL_EXTENSIONS.test(value))
        models.push({ classType, input, file: value });
    }
  }
  return { classTypes: [...classTypes], models };
}

/** Each definitions object's COMBO choices by class and input, read once (a pool asks on every submit). */
const choicesRead = new WeakMap<object, Map<string, Map<string, Set<unknown>>>>();

function choicesOf(
  definitions: Record<string, NodeTypeDefinition>,
  classType: string,
): Map<string, Set<unknown>> {
  let byClass = choicesRead.get(definitions);
  if (!byClass) {
    byClass = new Map();
    choicesRead.set(definitions, byClass);
  }
  let byInput = byClass.get(classType);
  if (!byInput) {
    byInput = new Map();
    for (const spec of inputSpecsOf(definitions[classType]))
      if (spec.type === 'COMBO' && spec.options) byInput.set(spec.name, new Set(spec.options));
    byClass.set(classType, byInput);
  }
  return byInput;
}

/**
 * What a server whose definitions these are lacks of `needs`, each as words for a sentence ("node class X",
 * "model file y for X.ckpt_name"); empty when it has all. A model input the definitions give no choices for is
 * not held against the server (a custom node's free text input).
 */
export function lacksOf(needs: WorkflowNeeds, definitions: Record<string, NodeTypeDefinition>): string[] {
  const lacks: string[] = [];
  for (const classType of needs.classTypes)
    if (!Object.hasOwn(definitions, classType)) lacks.push(`node class ${classType}`);
  for (const model of needs.models) {
    if (!Object.hasOwn(definitions, model.classType)) continue;
    const choices = choicesOf(definitions, model.classType).get(model.input);
    if (choices && !choices.has(model.file))
      lacks.push(`model file ${JSON.stringify(model.file)} for ${model.classType}.${model.input}`);
  }
  return lacks;
}
