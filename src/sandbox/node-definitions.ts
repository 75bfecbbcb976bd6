/**
 * The node types the generation stand-in knows (object_info) and how it checks a submitted prompt against them,
 * as self-hosted servers do, in the words of the ComfyUI version it answers as. Shared by today's API
 * (generation-service.ts) and the v2 mode (v2-service.ts), which validates as the ComfyUI behind the proxy.
 * No Node-RED inside.
 */

export interface NodeDefinition {
  input: { required: Record<string, unknown>; optional?: Record<string, unknown> };
  output: string[];
  output_name?: string[];
  name: string;
  display_name: string;
  category: string;
  output_node: boolean;
  api_node?: boolean;
  description?: string;
}

/** The definitions a typical deployment answers with (a text-to-image graph, image/mask loading, a partner node). */
export function defaultNodeDefinitions(): Record<string, NodeDefinition> {
  const definition = (
    name: string,
    category: string,
    required: Record<string, unknown>,
    output: string[],
    extra: Partial<NodeDefinition> = {},
  ): NodeDefinition => ({
    input: { required },
    output,
    output_name: output,
    name,
    display_name: name.replace(/([a-z])([A-Z])/g, '$1 $2'),
    category,
    output_node: false,
    ...extra,
  });
  return {
    CheckpointLoaderSimple: definition(
      'CheckpointLoaderSimple',
      'loaders',
      { ckpt_name: [['sd_xl_base_1.0.safetensors', 'v1-5-pruned-emaonly.safetensors']] },
      ['MODEL', 'CLIP', 'VAE'],
    ),
    CLIPTextEncode: definition(
      'CLIPTextEncode',
      'conditioning',
      { text: ['STRING', { multiline: true }], clip: ['CLIP'] },
      ['CONDITIONING'],
    ),
    EmptyLatentImage: definition(
      'EmptyLatentImage',
      'latent',
      {
        width: ['INT', { default: 512, min: 16, max: 16384, step: 8 }],
        height: ['INT', { default: 512, min: 16, max: 16384, step: 8 }],
        batch_size: ['INT', { default: 1, min: 1, max: 4096 }],
      },
      ['LATENT'],
    ),
    KSampler: definition(
      'KSampler',
      'sampling',
      {
        model: ['MODEL'],
        seed: ['INT', { default: 0, min: 0, max: Number.MAX_SAFE_INTEGER }],
        steps: ['INT', { default: 20, min: 1, max: 10000 }],
        cfg: ['FLOAT', { default: 8.0, min: 0.0, max: 100.0 }],
        sampler_name: [['euler', 'euler_ancestral', 'dpmpp_2m']],
        scheduler: [['normal', 'karras', 'simple']],
        positive: ['CONDITIONING'],
        negative: ['CONDITIONING'],
        latent_image: ['LATENT'],
        denoise: ['FLOAT', { default: 1.0, min: 0.0, max: 1.0 }],
      },
      ['LATENT'],
    ),
    VAEDecode: definition('VAEDecode', 'latent', { samples: ['LATENT'], vae: ['VAE'] }, ['IMAGE']),
    VAEEncode: definition('VAEEncode', 'latent', { pixels: ['IMAGE'], vae: ['VAE'] }, ['LATENT']),
    VAEEncodeForInpaint: definition(
      'VAEEncodeForInpaint',
      'latent/inpaint',
      {
        pixels: ['IMAGE'],
        vae: ['VAE'],
        mask: ['MASK'],
        grow_mask_by: ['INT', { default: 6, min: 0, max: 64 }],
      },
      ['LATENT'],
    ),
    ImageScale: definition(
      'ImageScale',
      'image/upscaling',
      {
        image: ['IMAGE'],
        upscale_method: [['nearest-exact', 'bilinear', 'area', 'bicubic', 'lanczos']],
        width: ['INT', { default: 512, min: 0, max: 16384 }],
        height: ['INT', { default: 512, min: 0, max: 16384 }],
        crop: [['disabled', 'center']],
      },
      ['IMAGE'],
    ),
    LoraLoader: definition(
      'LoraLoader',
      'loaders',
      {
        model: ['MODEL'],
        clip: ['CLIP'],
        lora_name: [['detail.safetensors']],
        strength_model: ['FLOAT', { default: 1.0 }],
        strength_clip: ['FLOAT', { default: 1.0 }],
      },
      ['MODEL', 'CLIP'],
    ),
    SaveImage: definition(
      'SaveImage',
      'image',
      { images: ['IMAGE'], filename_prefix: ['STRING', { default: 'ComfyUI' }] },
      [],
      { output_node: true },
    ),
    PreviewImage: definition('PreviewImage', 'image', { images: ['IMAGE'] }, [], { output_node: true }),
    LoadImage: definition('LoadImage', 'image', { image: [['example.png'], { image_upload: true }] }, [
      'IMAGE',
      'MASK',
    ]),
    LoadImageMask: definition(
      'LoadImageMask',
      'mask',
      { image: [['example.png'], { image_upload: true }], channel: [['alpha', 'red', 'green', 'blue']] },
      ['MASK'],
    ),
    PartnerImageGenerate: definition(
      'PartnerImageGenerate',
      'api node/image',
      {
        prompt: ['STRING', { multiline: true }],
        size: [['1024x1024', '1024x1536', '1536x1024']],
      },
      ['IMAGE'],
      { api_node: true, description: 'Generates an image with a partner service (needs the partner key).' },
    ),
  };
}

type NodeErrors = Record<
  string,
  { errors: Array<{ type: string; message: string; details: string }>; class_type: string }
>;

interface PromptProblem {
  error: { type: string; message: string; details: string; extra_info?: Record<string, unknown> };
  node_errors: NodeErrors;
}

/**
 * Validates a prompt the way self-hosted servers do, answering their 400 body shape. An unknown node is named in
 * the words of `serverVersion`: ComfyUI 0.8 "Cannot execute because node X does not exist." (invalid_prompt),
 * 0.33 "Node 'X' not found. The custom node may not be installed." (missing_node_type, with extra_info), as
 * the ComfyUI kits measured.
 */
export function validatePrompt(
  prompt: unknown,
  definitions: Record<string, NodeDefinition>,
  serverVersion = '0.8.0',
): PromptProblem | undefined {
  const invalid = (
    message: string,
    details = '',
    type = 'invalid_prompt',
    extra?: Record<string, unknown>,
  ) => {
    const problem: PromptProblem = { error: { type, message, details }, node_errors: {} };
    if (extra) problem.error.extra_info = extra;
    return problem;
  };
  const [major, minor] = serverVersion.split('.').map(Number);
  const namesMissingNodes = major > 0 || minor >= 33;
  if (!prompt || typeof prompt !== 'object' || Array.isArray(prompt)) {
    return invalid('Cannot execute because the prompt is not an object of nodes.');
  }
  const nodes = prompt as Record<string, { class_type?: unknown; inputs?: unknown }>;
  for (const [id, node] of Object.entries(nodes)) {
    if (!node || typeof node !== 'object' || typeof node.class_type !== 'string') {
      return invalid('Cannot execute because a node is missing the class_type property.', `Node ID '#${id}'`);
    }
    if (!definitions[node.class_type]) {
      return namesMissingNodes
        ? invalid(
            `Node '${node.class_type}' not found. The custom node may not be installed.`,
            `Node ID '#${id}'`,
            'missing_node_type',
            { node_id: id, class_type: node.class_type, node_title: node.class_type },
          )
        : invalid(`Cannot execute because node ${node.class_type} does not exist.`, `Node ID '#${id}'`);
    }
  }
  const nodeErrors: NodeErrors = {};
  let hasOutput = false;
  for (const [id, node] of Object.entries(nodes)) {
    const definition = definitions[node.class_type as string];
    if (definition.output_node) hasOutput = true;
    const inputs = (node.inputs && typeof node.inputs === 'object' ? node.inputs : {}) as Record<
      string,
      unknown
    >;
    const errors: NodeErrors[string]['errors'] = [];
    for (const name of Object.keys(definition.input.required)) {
      const value = inputs[name];
      if (value === undefined) {
        errors.push({ type: 'required_input_missing', message: 'Required input is missing', details: name });
      } else if (Array.isArray(value) && value.length === 2 && typeof value[0] === 'string') {
        if (!nodes[value[0]]) {
          errors.push({
            type: 'bad_linked_input',
            message: 'Bad linked input, must be a length-2 list of [node_id, slot_index]',
            details: `${name}, ${JSON.stringify(value)}`,
          });
        }
      }
    }
    if (errors.length > 0) nodeErrors[id] = { errors, class_type: node.class_type as string };
  }
  if (!hasOutput) {
    return {
      error: { type: 'prompt_no_outputs', message: 'Prompt has no outputs', details: '' },
      node_errors: {},
    };
  }
  if (Object.keys(nodeErrors).length > 0) {
    return {
      error: {
        type: 'prompt_outputs_failed_validation',
        message: 'Prompt outputs failed validation',
        details: '',
      },
      node_errors: nodeErrors,
    };
  }
  return undefined;
}
