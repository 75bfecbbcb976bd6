'use strict';
// Node definitions as the graph editor reads them, and UI-format workflows converted to API format with them.
// object_info.json is GET /api/object_info of the real ComfyUI v0.8.0 (trimmed to the classes used here).
const assert = require('node:assert/strict');
const objectInfo = require('../../fixtures/object_info.json');
const {
  inputSpecsOf,
  displayNameOf,
  outputTypesOf,
} = require('../../../dist/generation/workflows/node-definitions');
const { convertUiWorkflow, isUiWorkflow } = require('../../../dist/generation/workflows/ui-workflow');
const {
  resolveDynamicPrompt,
  MAX_DYNAMIC_PROMPT_CHARS,
  MAX_DYNAMIC_PROMPT_DEPTH,
} = require('../../../dist/generation/workflows/dynamic-prompt');

describe('node definitions', () => {
  const specsOf = (classType) => inputSpecsOf(objectInfo[classType]);
  const pick = (specs, name) => specs.find((spec) => spec.name === name);

  it('lists the inputs in input_order, widgets and sockets told apart, hidden inputs left out', () => {
    const specs = specsOf('SaveImage');
    assert.deepEqual(
      specs.map(({ name, type, widget, required }) => ({ name, type, widget, required })),
      [
        { name: 'images', type: 'IMAGE', widget: false, required: true },
        { name: 'filename_prefix', type: 'STRING', widget: true, required: true },
      ],
    );
    assert.equal(pick(specs, 'filename_prefix').default, 'ComfyUI');
  });

  it('reads INT bounds and defaults', () => {
    const width = pick(specsOf('EmptyImage'), 'width');
    assert.deepEqual(width, {
      name: 'width',
      type: 'INT',
      widget: true,
      required: true,
      default: 512,
      min: 1,
      max: 16384,
      step: 1,
      controlAfterGenerate: false,
    });
    assert.deepEqual(
      specsOf('EmptyImage').map((spec) => spec.name),
      ['width', 'height', 'batch_size', 'color'],
    );
  });

  it('reads both COMBO forms: a list of choices, and "COMBO" with options', () => {
    const method = pick(specsOf('ImageScale'), 'upscale_method');
    assert.equal(method.type, 'COMBO');
    assert.equal(method.widget, true);
    assert.deepEqual(method.options, ['nearest-exact', 'bilinear', 'area', 'bicubic', 'lanczos']);
    const dim = pick(specsOf('LatentConcat'), 'dim');
    assert.equal(dim.type, 'COMBO');
    assert.equal(dim.widget, true);
    assert.deepEqual(dim.options, ['x', '-x', 'y', '-y', 't', '-t']);
    // An empty choice list (no checkpoints on the server) is still a COMBO widget.
    const checkpoint = pick(specsOf('CheckpointLoaderSimple'), 'ckpt_name');
    assert.equal(checkpoint.type, 'COMBO');
    assert.deepEqual(checkpoint.options, []);
  });

  it('marks control_after_generate, asked for or by the legacy seed names', () => {
    const seeds = [
      ['KSampler', 'seed'],
      ['RandomNoise', 'noise_seed'],
      ['ImageAddNoise', 'seed'],
      ['PrimitiveInt', 'value'],
    ];
    for (const [classType, name] of seeds) {
      assert.equal(pick(specsOf(classType), name).controlAfterGenerate, true, `${classType}.${name}`);
    }
    assert.equal(pick(specsOf('KSampler'), 'steps').controlAfterGenerate, false);
    // The legacy rule: an INT named seed without the flag still gets the control widget in the editor.
    const legacy = inputSpecsOf({ input: { required: { seed: ['INT', { default: 0 }] } } });
    assert.equal(legacy[0].controlAfterGenerate, true);
    const declined = inputSpecsOf({
      input: { required: { seed: ['INT', { control_after_generate: false }] } },
    });
    assert.equal(declined[0].controlAfterGenerate, false);
  });

  it('treats forceInput value inputs as sockets, and keeps optional inputs after required ones', () => {
    const specs = specsOf('CreateHookKeyframesFromFloats');
    assert.equal(pick(specs, 'floats_strength').widget, false);
    assert.equal(pick(specs, 'start_percent').widget, true);
    assert.equal(pick(specs, 'print_keyframes').type, 'BOOLEAN');
    const last = specs[specs.length - 1];
    assert.deepEqual([last.name, last.required, last.widget], ['prev_hook_kf', false, false]);
    const composite = specsOf('ImageCompositeMasked');
    assert.deepEqual(
      composite.map((spec) => `${spec.name}:${spec.required ? 'required' : 'optional'}`),
      [
        'destination:required',
        'source:required',
        'x:required',
        'y:required',
        'resize_source:required',
        'mask:optional',
      ],
    );
  });

  it('reads multiline text, and follows input_order over the object order', () => {
    assert.equal(pick(specsOf('CLIPTextEncode'), 'text').multiline, true);
    const reordered = inputSpecsOf({
      input: { required: { b: ['INT'], a: ['FLOAT'] }, optional: { z: ['IMAGE'], y: ['STRING'] } },
      input_order: { required: ['a', 'b'], optional: ['y', 'z'] },
    });
    assert.deepEqual(
      reordered.map((spec) => spec.name),
      ['a', 'b', 'y', 'z'],
    );
  });

  it('gives nothing for what is not a definition, and names classes as the editor does', () => {
    assert.deepEqual(inputSpecsOf(undefined), []);
    assert.deepEqual(inputSpecsOf({ input: 'x' }), []);
    assert.equal(displayNameOf(objectInfo.ImageScale, 'ImageScale'), 'Upscale Image');
    // ImageBlur's display_name is null in v0.8.0: the editor titles it with the class name.
    assert.equal(displayNameOf(objectInfo.ImageBlur, 'ImageBlur'), 'ImageBlur');
    assert.deepEqual(outputTypesOf(objectInfo.LoadImage), ['IMAGE', 'MASK']);
  });
});

describe('UI-format workflows', () => {
  const fixture = (name) => structuredClone(require(`../../fixtures/ui/${name}.json`));
  const expected = (name) => require(`../../fixtures/ui/${name}.expected.json`);
  const definitionOf = (classType) => objectInfo[classType];
  const convert = (ui, definitions = definitionOf, options) => convertUiWorkflow(ui, definitions, options);
  const nodeOf = (ui, id) => ui.nodes.find((node) => node.id === id);
  /** The refusal of converting `ui`: an invalid_input ServiceError; resolves to its message. */
  const refusalOf = (ui, definitions = definitionOf) => {
    try {
      convert(ui, definitions);
    } catch (error) {
      assert.equal(error.code, 'invalid_input', error.message);
      assert.match(error.message, /^The UI-format workflow cannot be converted to API format: /);
      return error.message;
    }
    assert.fail('the workflow was converted, not refused');
  };

  it('tells UI format from API format', () => {
    assert.equal(isUiWorkflow(fixture('image-chain')), true);
    assert.equal(isUiWorkflow(fixture('links-as-objects')), true);
    assert.equal(isUiWorkflow(expected('image-chain')), false);
    assert.equal(isUiWorkflow({ nodes: [] }), false);
    assert.equal(isUiWorkflow('{"nodes":[],"links":[]}'), false);
    assert.equal(isUiWorkflow(null), false);
    assert.throws(
      () => convert(expected('image-chain')),
      (error) => error.code === 'invalid_input' && /"nodes" and "links" arrays/.test(error.message),
    );
  });

  it('maps widget values in definition order, skipping the control value after a seed; notes are dropped', () => {
    const api = convert(fixture('image-chain'));
    assert.deepEqual(api, expected('image-chain'));
    assert.deepEqual(Object.keys(api), ['1', '2', '3', '4'], 'the Note and the MarkdownNote are gone');
  });

  it('follows links through Reroutes, and skips the upload button value of LoadImage', () => {
    assert.deepEqual(convert(fixture('load-reroute')), expected('load-reroute'));
  });

  it('takes a widget turned into a socket from its link, and a PrimitiveNode value into the widgets it feeds', () => {
    const api = convert(fixture('primitive-sockets'));
    assert.deepEqual(api, expected('primitive-sockets'));
    assert.equal(api['23'].inputs.width, 24, 'the PrimitiveNode value, not the stale 512 in widgets_values');
    assert.deepEqual(api['23'].inputs.height, ['21', 1], 'the link, not the stale 512');
    assert.equal(api['22'], undefined, 'the PrimitiveNode itself is not sent');
  });

  it('a PrimitiveNode reaches a widget through a Reroute too', () => {
    const ui = fixture('primitive-sockets');
    // Primitive 22 -> Reroute 90 -> ImageScale 23 width.
    ui.nodes.push({
      id: 90,
      type: 'Reroute',
      mode: 0,
      inputs: [{ name: '', type: '*', link: 90 }],
      outputs: [{ name: '', type: 'INT', links: [23] }],
    });
    ui.links = ui.links.filter((link) => link[0] !== 23);
    ui.links.push([90, 22, 0, 90, 0, '*'], [23, 90, 0, 23, 1, 'INT']);
    nodeOf(ui, 22).widgets_values = [28, 'increment'];
    assert.equal(convert(ui)['23'].inputs.width, 28);
  });

  it('drops muted nodes and passes bypassed nodes through by type', () => {
    assert.deepEqual(convert(fixture('muted-bypassed')), expected('muted-bypassed'));
  });

  it('a bypassed node passes on the input of the target type, not merely the first one', () => {
    const definitions = {
      ...objectInfo,
      Mix: {
        input: { required: { mask: ['MASK'], picture: ['IMAGE'], amount: ['FLOAT', { default: 0.5 }] } },
        output: ['IMAGE'],
        name: 'Mix',
      },
    };
    const ui = fixture('load-reroute');
    // LoadImage 10: IMAGE -> Mix 91 picture, MASK -> Mix 91 mask; Mix (bypassed) -> ImageInvert 15.
    ui.nodes.push({
      id: 91,
      type: 'Mix',
      mode: 4,
      inputs: [
        { name: 'mask', type: 'MASK', link: 92 },
        { name: 'picture', type: 'IMAGE', link: 91 },
      ],
      outputs: [{ name: 'IMAGE', type: 'IMAGE', links: [15] }],
      widgets_values: [0.5],
    });
    ui.links = ui.links.filter((link) => link[0] !== 15);
    ui.links.push([91, 10, 0, 91, 1, 'IMAGE'], [92, 10, 1, 91, 0, 'MASK'], [15, 91, 0, 15, 0, 'IMAGE']);
    const api = convert(ui, (classType) => definitions[classType]);
    assert.deepEqual(api['15'].inputs, { image: ['10', 0] });
    assert.equal(api['91'], undefined);
  });

  it('reads links saved as objects (newer files), native reroutes changing nothing', () => {
    assert.deepEqual(convert(fixture('links-as-objects')), expected('links-as-objects'));
  });

  it('leaves out an unlinked optional input, and refuses an unlinked required one naming node and input', () => {
    const ui = {
      nodes: [
        {
          id: 1,
          type: 'EmptyImage',
          mode: 0,
          outputs: [{ type: 'IMAGE', links: [1, 2] }],
          widgets_values: [8, 8, 1, 0],
        },
        {
          id: 2,
          type: 'ImageCompositeMasked',
          mode: 0,
          inputs: [
            { name: 'destination', type: 'IMAGE', link: 1 },
            { name: 'source', type: 'IMAGE', link: 2 },
            { name: 'mask', type: 'MASK', link: null, shape: 7 },
          ],
          outputs: [{ type: 'IMAGE', links: [] }],
          widgets_values: [1, 2, true],
        },
      ],
      links: [
        [1, 1, 0, 2, 0, 'IMAGE'],
        [2, 1, 0, 2, 1, 'IMAGE'],
      ],
    };
    assert.deepEqual(convert(ui)['2'], {
      inputs: { x: 1, y: 2, resize_source: true, destination: ['1', 0], source: ['1', 0] },
      class_type: 'ImageCompositeMasked',
      _meta: { title: 'ImageCompositeMasked' },
    });
    ui.nodes[1].inputs[1].link = null;
    ui.nodes[1].title = 'Paste';
    const message = refusalOf(ui);
    assert.match(
      message,
      /input "source" of node "2" \("Paste", ImageCompositeMasked\) is required but not connected/,
    );
  });

  it('refuses an input fed by a muted node, or by a bypassed node with nothing of its type', () => {
    const muted = fixture('muted-bypassed');
    nodeOf(muted, 35).mode = 0; // SaveImage 35 now runs, but its image comes from muted ImageInvert 34
    assert.match(
      refusalOf(muted),
      /input "images" of node "35" \(SaveImage\) comes from muted node "34" \(ImageInvert\): unmute that node, or mute this one too/,
    );
    const bypassed = fixture('muted-bypassed');
    nodeOf(bypassed, 30).mode = 4; // EmptyImage has no IMAGE input to pass on
    nodeOf(bypassed, 34).mode = 0;
    nodeOf(bypassed, 35).mode = 0;
    const message = refusalOf(bypassed);
    // Through bypassed ImageBlur 31 to bypassed EmptyImage 30.
    assert.match(
      message,
      /input "image" of node "32" \(ImageScale\) gets nothing: it comes from bypassed node "30" \(EmptyImage\), which has no IMAGE input to pass on/,
    );
    assert.match(
      message,
      /input "image" of node "34" \(ImageInvert\)/,
      'every problem is named, not only the first',
    );
  });

  it('refuses group nodes, subgraphs and unknown classes with a sentence naming the node', () => {
    const grouped = fixture('image-chain');
    nodeOf(grouped, 3).type = 'workflow>Blur group';
    grouped.extra.groupNodes = { 'Blur group': { nodes: [], links: [] } };
    assert.match(
      refusalOf(grouped),
      /node "3" \("Soften", workflow>Blur group\) is a group node, which cannot be converted: .*Convert to nodes/,
    );

    const nested = fixture('links-as-objects');
    const subgraphId = '0b6e2b1c-5d7a-4c36-9a0f-7a1d9a3c2e10';
    nested.definitions.subgraphs.push({ id: subgraphId, name: 'Blur twice', nodes: [], links: [] });
    nodeOf(nested, 41).type = subgraphId;
    nodeOf(nested, 41).title = 'Blur twice';
    assert.match(
      refusalOf(nested),
      /node "41" \("Blur twice"\) is a subgraph, which cannot be converted: unpack it .*Unpack Subgraph/,
    );

    const unknown = fixture('image-chain');
    nodeOf(unknown, 2).type = 'FancySharpen';
    assert.match(
      refusalOf(unknown),
      /node "2" \(FancySharpen\) is of class FancySharpen, which the service does not have: install the custom nodes/,
    );
    // Muted, an unknown class is simply dropped (the editor never sends it).
    nodeOf(unknown, 2).mode = 2;
    nodeOf(unknown, 3).mode = 2;
    nodeOf(unknown, 4).mode = 2;
    assert.deepEqual(Object.keys(convert(unknown)), ['1']);
  });

  it('refuses a link the workflow does not have, naming node and input', () => {
    const ui = fixture('image-chain');
    ui.links = ui.links.filter((link) => link[0] !== 2);
    assert.match(
      refusalOf(ui),
      /input "image" of node "3" \("Soften", ImageBlur\) gets nothing: its link 2 is not in the workflow's links/,
    );
  });

  it('takes defaults for widget values a file lacks, and values saved by name', () => {
    const ui = fixture('image-chain');
    nodeOf(ui, 1).widgets_values = [64];
    nodeOf(ui, 3).widgets_values = { sigma: 2 };
    const api = convert(ui);
    assert.deepEqual(api['1'].inputs, { width: 64, height: 512, batch_size: 1, color: 0 });
    assert.deepEqual(api['3'].inputs, { blur_radius: 1, sigma: 2, image: ['2', 0] });
  });

  it('drops the dummy values older files saved for forceInput inputs, and boxes list values', () => {
    const definitions = {
      Source: { input: { required: {} }, output: ['STRING'], name: 'Source' },
      Joiner: {
        input: {
          required: {
            text: ['STRING', { forceInput: true }],
            count: ['INT', { default: 1 }],
            parts: ['COMBO', { options: ['a', 'b', 'c'], multiselect: true }],
          },
        },
        input_order: { required: ['text', 'count', 'parts'] },
        output: ['STRING'],
        name: 'Joiner',
      },
    };
    const ui = {
      nodes: [
        { id: 1, type: 'Source', mode: 0, outputs: [{ type: 'STRING', links: [1] }] },
        {
          id: 2,
          type: 'Joiner',
          mode: 0,
          inputs: [{ name: 'text', type: 'STRING', link: 1 }],
          // Before frontend 1.16: an entry for "text" too.
          widgets_values: ['', 3, ['a', 'c']],
        },
      ],
      links: [[1, 1, 0, 2, 0, 'STRING']],
    };
    const api = convert(ui, (classType) => definitions[classType]);
    assert.deepEqual(api['2'].inputs, { count: 3, parts: { __value__: ['a', 'c'] }, text: ['1', 0] });
    ui.nodes[1].widgets_values = [4, ['b']];
    assert.deepEqual(convert(ui, (classType) => definitions[classType])['2'].inputs.count, 4);
  });

  it('resolves dynamic prompts in text that asks for them, as the editor does when it queues', () => {
    assert.equal(
      resolveDynamicPrompt('a {red|blue} cat', () => 0),
      'a red cat',
    );
    assert.equal(
      resolveDynamicPrompt('a {red|{dark|light} blue} cat', () => 0.99),
      'a light blue cat',
    );
    assert.equal(
      resolveDynamicPrompt('keep \\{this\\} /* not this */ // nor this', () => 0),
      'keep {this}  ',
    );
    const api = convert(promptWorkflow('a {red|blue} fox'), definitionOf, { random: () => 0.9 });
    assert.deepEqual(api['6'].inputs, { text: 'a blue fox', clip: ['4', 1] });
    assert.deepEqual(api['4'].inputs, { ckpt_name: 'model.safetensors' });
    assert.equal(api['6']._meta.title, 'CLIP Text Encode (Prompt)');
  });
  /** A checkpoint loader wired into a text encoder whose (dynamic-prompt) text is `text`. */
  const promptWorkflow = (text) => ({
    nodes: [
      {
        id: 4,
        type: 'CheckpointLoaderSimple',
        mode: 0,
        outputs: [{}, { type: 'CLIP', links: [1] }, {}],
        widgets_values: ['model.safetensors'],
      },
      {
        id: 6,
        type: 'CLIPTextEncode',
        mode: 0,
        inputs: [{ name: 'clip', type: 'CLIP', link: 1 }],
        widgets_values: [text],
      },
    ],
    links: [[1, 4, 1, 6, 0, 'CLIP']],
  });

  it('bounds dynamic prompts: groups nested past the limit or text past the limit are refused, not a stack overflow', () => {
    const nested = (depth, option = 'x') => `${'{a|'.repeat(depth)}${option}${'}'.repeat(depth)}`;
    // At the limit: resolved, the last option of every level chosen.
    assert.equal(
      resolveDynamicPrompt(nested(MAX_DYNAMIC_PROMPT_DEPTH), () => 0.99),
      'x',
    );
    assert.equal(
      resolveDynamicPrompt(nested(MAX_DYNAMIC_PROMPT_DEPTH), () => 0),
      'a',
    );
    // Past it, however far past (16,000 levels overflowed the stack), a refusal that says what to do.
    for (const depth of [MAX_DYNAMIC_PROMPT_DEPTH + 1, 20_000]) {
      assert.throws(
        () => resolveDynamicPrompt(nested(depth), () => 0.99),
        (error) =>
          error.code === 'invalid_input' &&
          /nests \{…\|…\} groups more than 64 deep: write it with fewer levels/.test(error.message),
      );
    }
    const unclosed = '{'.repeat(20_000);
    assert.throws(
      () => resolveDynamicPrompt(unclosed),
      (error) => error.code === 'invalid_input',
    );
    assert.throws(
      () => resolveDynamicPrompt('a'.repeat(MAX_DYNAMIC_PROMPT_CHARS + 1)),
      (error) =>
        error.code === 'invalid_input' && /characters long, more than the 262144/.test(error.message),
    );
    // Text just under the limit with a group every few characters and unclosed comment openers: a result.
    const flat = '{red|blue} /* '.repeat(Math.floor(MAX_DYNAMIC_PROMPT_CHARS / 14));
    assert.equal(
      resolveDynamicPrompt(flat, () => 0),
      'red /* '.repeat(Math.floor(MAX_DYNAMIC_PROMPT_CHARS / 14)),
    );
    // In a workflow, the refusal names the node and the input.
    const message = refusalOf(promptWorkflow(nested(16_000)));
    assert.match(message, /input "text" of node "6" \(CLIPTextEncode\): the dynamic prompt nests/);
  });

  it('follows a chain of thousands of Reroutes shared by many inputs, without a stack overflow', () => {
    const ui = promptWorkflow('a fox');
    const chain = 20_000;
    ui.links = [];
    let from = [4, 1];
    for (let index = 0; index < chain; index++) {
      const id = 1000 + index;
      ui.links.push([id, from[0], from[1], id, 0, 'CLIP']);
      ui.nodes.push({
        id,
        type: 'Reroute',
        mode: 0,
        inputs: [{ name: '', type: '*', link: id }],
        outputs: [{}],
      });
      from = [id, 0];
    }
    const encoders = 2_000;
    ui.nodes = ui.nodes.filter((node) => node.id !== 6);
    for (let index = 0; index < encoders; index++) {
      const id = 100_000 + index;
      ui.links.push([id, from[0], from[1], id, 0, 'CLIP']);
      ui.nodes.push({
        id,
        type: 'CLIPTextEncode',
        mode: 0,
        inputs: [{ name: 'clip', type: 'CLIP', link: id }],
        widgets_values: ['a fox'],
      });
    }
    const api = convert(ui);
    assert.equal(Object.keys(api).length, encoders + 1);
    assert.deepEqual(api['100000'].inputs.clip, ['4', 1]);
    assert.deepEqual(api[String(100_000 + encoders - 1)].inputs.clip, ['4', 1]);
  });
});
