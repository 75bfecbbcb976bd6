'use strict';
// The readers of workflows and node definitions (a msg's workflow, the server's object_info) against hostile
// values: they never throw but a ServiceError of code invalid_input, never take a prototype member for an
// input or a node, and keep a word from outside as an own key.
const assert = require('node:assert/strict');
const { fc, fuzzOptions, hostileJson, PROTOTYPE_WORDS } = require('../support/fuzz');
const {
  inputSpecsOf,
  outputTypesOf,
  displayNameOf,
} = require('../../dist/generation/workflows/node-definitions');
const { editorDefinitionsOf } = require('../../dist/generation/workflows/definitions-cache');
const { convertUiWorkflow } = require('../../dist/generation/workflows/ui-workflow');
const {
  validateWorkflow,
  checkAgainstDefinitions,
  describeSubmitProblems,
} = require('../../dist/generation/workflows/workflow');

function refusedInWords(run) {
  try {
    return run();
  } catch (error) {
    assert.equal(error.name, 'ServiceError', String(error && error.stack));
    assert.equal(error.code, 'invalid_input');
    assert.equal(typeof error.message, 'string');
    return undefined;
  }
}

/** A definition shaped as object_info's, with hostile parts where a server could put them. */
function hostileDefinition() {
  const name = fc.oneof(fc.constantFrom(...PROTOTYPE_WORDS), fc.string({ maxLength: 8 }));
  const spec = fc.oneof(
    hostileJson(),
    fc.tuple(hostileJson(), hostileJson()),
    fc.tuple(fc.constant('INT'), fc.record({ default: hostileJson(), min: hostileJson() })),
  );
  return fc
    .record({
      input: fc.oneof(
        hostileJson(),
        fc.record({
          required: fc.dictionary(name, spec, { maxKeys: 5 }),
          optional: fc.dictionary(name, spec, { maxKeys: 3 }),
        }),
      ),
      input_order: fc.oneof(hostileJson(), fc.record({ required: fc.array(name, { maxLength: 6 }) })),
      output: fc.oneof(hostileJson(), fc.array(hostileJson(), { maxLength: 4 })),
      display_name: hostileJson(),
    })
    .map((value) => JSON.parse(JSON.stringify(value)));
}

describe('workflow and definition readers (fuzzed)', () => {
  it('a definition gives own inputs with text types and bounded names, whatever it holds', () => {
    fc.assert(
      fc.property(fc.oneof(hostileDefinition(), hostileJson()), (definition) => {
        for (const spec of inputSpecsOf(definition)) {
          assert.equal(typeof spec.type, 'string');
          assert.ok(spec.type.length <= 200);
          const sections = [definition.input.required, definition.input.optional];
          assert.ok(
            sections.some((section) => section && Object.hasOwn(section, spec.name)),
            spec.name,
          );
        }
        for (const type of outputTypesOf(definition))
          assert.ok(typeof type === 'string' && type.length <= 200);
        assert.equal(typeof displayNameOf(definition, 'K'), 'string');
      }),
      fuzzOptions(100),
    );
  });

  it("the editor's view of object_info keeps every class as an own entry, __proto__ included", () => {
    fc.assert(
      fc.property(
        fc.dictionary(fc.constantFrom(...PROTOTYPE_WORDS, 'KSampler'), hostileDefinition(), { maxKeys: 4 }),
        (info) => {
          const parsed = JSON.parse(JSON.stringify(info));
          const view = editorDefinitionsOf(parsed);
          assert.deepEqual(Object.keys(view).sort(), Object.keys(parsed).sort());
          assert.equal(Object.getPrototypeOf(view), Object.prototype);
        },
      ),
      fuzzOptions(40),
    );
  });

  it('a hostile UI workflow is converted or refused in words, never thrown at otherwise', () => {
    const node = fc.record({
      id: fc.oneof(fc.constantFrom(...PROTOTYPE_WORDS), fc.integer({ min: 0, max: 5 }), hostileJson()),
      type: fc.oneof(
        fc.constantFrom(...PROTOTYPE_WORDS, 'KSampler', 'Reroute', 'PrimitiveNode'),
        hostileJson(),
      ),
      mode: hostileJson(),
      inputs: fc.oneof(
        hostileJson(),
        fc.array(
          fc.record({
            name: fc.constantFrom(...PROTOTYPE_WORDS, 'seed'),
            type: hostileJson(),
            link: hostileJson(),
          }),
          { maxLength: 3 },
        ),
      ),
      widgets_values: hostileJson(),
    });
    const ui = fc.record({
      nodes: fc.array(node, { maxLength: 5 }),
      links: fc.oneof(
        fc.array(hostileJson(), { maxLength: 4 }),
        fc.array(fc.array(fc.integer({ min: 0, max: 5 }), { minLength: 6, maxLength: 6 }), { maxLength: 4 }),
      ),
      extra: hostileJson(),
      definitions: hostileJson(),
    });
    fc.assert(
      fc.property(
        ui,
        fc.dictionary(fc.constantFrom(...PROTOTYPE_WORDS, 'KSampler'), hostileDefinition(), { maxKeys: 3 }),
        (raw, info) => {
          const parsedUi = JSON.parse(JSON.stringify(raw));
          const parsedInfo = JSON.parse(JSON.stringify(info));
          const workflow = refusedInWords(() =>
            convertUiWorkflow(
              parsedUi,
              (type) => (Object.hasOwn(parsedInfo, type) ? parsedInfo[type] : undefined),
              { random: () => 0 },
            ),
          );
          if (workflow === undefined) return;
          for (const id of Object.keys(workflow)) assert.equal(typeof workflow[id].class_type, 'string');
          refusedInWords(() => validateWorkflow(workflow));
        },
      ),
      fuzzOptions(60),
    );
  });

  it('a link whose origin slot holds a value without a toString is read as slot 0, not thrown at (found by npm run fuzz, seed 20261127)', () => {
    const ui = JSON.parse(
      '{"nodes": [], "links": [[1, 2, [{"toString": 1}], 3, 0, "IMAGE"], {"id": 2, "origin_id": 2, "origin_slot": {"valueOf": 1}}]}',
    );
    assert.deepEqual(
      refusedInWords(() => convertUiWorkflow(ui, () => undefined, { random: () => 0 })),
      {},
    );
  });

  it('an API workflow and a submit answer from anywhere are checked in words', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          hostileJson(),
          fc.dictionary(fc.constantFrom(...PROTOTYPE_WORDS, '1'), hostileJson(), { maxKeys: 3 }),
        ),
        hostileDefinition(),
        (raw, definition) => {
          const parsed = JSON.parse(JSON.stringify(raw));
          const workflow = refusedInWords(() => validateWorkflow(parsed));
          if (workflow) refusedInWords(() => checkAgainstDefinitions(workflow, () => definition));
          const sentence = describeSubmitProblems(parsed);
          assert.ok(sentence === undefined || typeof sentence === 'string');
        },
      ),
      fuzzOptions(60),
    );
  });

  it('words that name prototype members are plain words: a link to "constructor" is refused, a node "__proto__" kept', () => {
    const link = { 1: { class_type: 'A', inputs: { x: ['constructor', 0] } } };
    assert.throws(() => validateWorkflow(link), /links to node "constructor", which is not in the workflow/);
    const definition = { input: { required: { toString: ['INT', {}] } } };
    assert.throws(
      () => checkAgainstDefinitions({ 1: { class_type: 'A', inputs: {} } }, () => definition),
      /lacks required input "toString"/,
    );
    assert.deepEqual(
      inputSpecsOf({
        input: { required: { a: [{ toString: 1 }] } },
        input_order: { required: ['constructor', 'a'] },
      }).map((spec) => [spec.name, spec.type]),
      [['a', '*']],
    );
    const view = editorDefinitionsOf(
      JSON.parse('{"__proto__": {"input": {"required": {"seed": ["INT", {}]}}}}'),
    );
    assert.ok(Object.hasOwn(view, '__proto__'));
    assert.deepEqual(
      view.__proto__.inputs.map((spec) => spec.name),
      ['seed'],
    );
    const ui = JSON.parse(
      '{"nodes": [{"id": "__proto__", "type": "Save", "inputs": [], "widgets_values": ["x"]}], "links": []}',
    );
    const saveDefinition = { input: { required: { filename_prefix: ['STRING', {}] } } };
    const workflow = convertUiWorkflow(ui, () => saveDefinition);
    assert.ok(Object.hasOwn(workflow, '__proto__'));
    assert.deepEqual(JSON.parse(JSON.stringify(workflow)).__proto__.inputs, { filename_prefix: 'x' });
  });
});
