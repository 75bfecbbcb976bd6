'use strict';
// Node definitions as the graph editor reads them, and UI-format workflows converted to API format with them.
// object_info.json is GET /api/object_info of the real ComfyUI v0.8.0 (trimmed to the classes used here).
const assert = require('node:assert/strict');
const objectInfo = require('./fixtures/object_info.json');
const { inputSpecsOf, displayNameOf, outputTypesOf } = require('../dist/generation/node-definitions');

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
