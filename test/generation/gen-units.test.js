'use strict';
// The pure pieces under the generation REST nodes, table-driven.
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const { PassThrough, Readable } = require('node:stream');
const { readMultipart } = require('../../dist/sandbox/multipart');
const { multipartBody } = require('../../dist/generation/transfer/multipart-body');
const {
  describeSubmitProblems,
  applyOverrides,
  validateWorkflow,
} = require('../../dist/generation/workflows/workflow');
const { referencesOf, targetPath } = require('../../dist/generation/transfer/downloads');
const { promptIdOfQueueElement } = require('../../dist/generation/transfer/rest-client');

describe('generation REST pieces', () => {
  describe('multipart body and the sandbox reader', () => {
    const content = crypto.randomBytes(100_000);
    /** The whole body as the request would send it (form-data streams the classic way, by pipe). */
    const bytesOf = (form) =>
      new Promise((resolve, reject) => {
        const chunks = [];
        const sink = new PassThrough();
        sink.on('data', (chunk) => chunks.push(chunk));
        sink.on('end', () => resolve(Buffer.concat(chunks)));
        sink.on('error', reject);
        form.open().pipe(sink);
      });
    async function roundTrip(chunkSize) {
      const form = multipartBody([
        { name: 'image', filename: 'a.png', contentType: 'image/png', content },
        { name: 'type', value: 'input' },
        { name: 'original_ref', value: '{"filename":"x.png"}' },
      ]);
      const whole = await bytesOf(form);
      assert.equal(whole.length, form.length, 'the announced length is exact');
      const pieces = [];
      for (let at = 0; at < whole.length; at += chunkSize) pieces.push(whole.subarray(at, at + chunkSize));
      const received = [];
      const boundary = /boundary=(.+)$/.exec(form.contentType)[1];
      const result = await readMultipart(Readable.from(pieces), boundary, () => ({
        write: (chunk) => received.push(Buffer.from(chunk)),
        end: () => undefined,
      }));
      return { result, received: Buffer.concat(received) };
    }
    for (const chunkSize of [1, 7, 70, 65536, 1 << 20]) {
      it(`survives a body split into ${chunkSize}-byte chunks`, async () => {
        const { result, received } = await roundTrip(chunkSize);
        assert.ok(received.equals(content));
        assert.deepEqual(result.fields, { type: 'input', original_ref: '{"filename":"x.png"}' });
        assert.deepEqual(result.files, [
          { field: 'image', filename: 'a.png', contentType: 'image/png', size: content.length },
        ]);
      });
    }
    it('refuses a body cut before its closing boundary', async () => {
      const form = multipartBody([{ name: 'type', value: 'input' }]);
      const cut = (await bytesOf(form)).subarray(0, 40);
      const boundary = /boundary=(.+)$/.exec(form.contentType)[1];
      await assert.rejects(
        readMultipart(Readable.from([cut]), boundary, () => undefined),
        /ended before/,
      );
    });
  });

  describe('submit answers', () => {
    const cases = [
      [{ prompt_id: 'p', number: 1, node_errors: {} }, undefined],
      [{ prompt_id: 'p', error: null, node_errors: {} }, undefined],
      [{ error: 'Workflow contains banned node' }, 'Workflow contains banned node'],
      [
        {
          error: {
            type: 'prompt_outputs_failed_validation',
            message: 'Prompt outputs failed validation',
            details: '',
          },
          node_errors: {
            3: {
              errors: [
                {
                  type: 'value_not_in_list',
                  message: 'Value not in list',
                  details: 'sampler_name: bogus',
                  extra_info: { input_name: 'sampler_name' },
                },
              ],
              class_type: 'KSampler',
            },
          },
        },
        'Prompt outputs failed validation (node "3" (KSampler): Value not in list "sampler_name")',
      ],
      [
        { node_errors: { 7: { errors: [], class_type: 'X' } } },
        'the service refused the workflow (node "7" (X): invalid)',
      ],
    ];
    for (const [body, expected] of cases) {
      it(`describes ${JSON.stringify(body).slice(0, 60)}`, () => {
        assert.equal(describeSubmitProblems(body), expected);
      });
    }
  });

  it('applies overrides on a deep copy, values included', () => {
    const template = validateWorkflow({ 1: { class_type: 'A', inputs: { list: [1, 2], text: 'a' } } });
    const copy = applyOverrides(template, { 1: { text: 'b', extra: { deep: [1] } } });
    copy[1].inputs.list.push(3);
    assert.deepEqual(template[1].inputs, { list: [1, 2], text: 'a' });
    assert.equal(copy[1].inputs.text, 'b');
    assert.throws(() => applyOverrides(template, 'x'), /msg.inputs must be an object/);
    assert.throws(() => applyOverrides(template, { 1: 5 }), /msg.inputs\["1"\] must be an object/);
  });

  it('applies msg.inputs to nodes whose ids are prototype words, as to any other', () => {
    const template = validateWorkflow(
      JSON.parse(
        '{"__proto__": {"class_type": "A", "inputs": {"text": "a"}}, "constructor": {"class_type": "A", "inputs": {"text": "a"}}}',
      ),
    );
    const copy = applyOverrides(
      template,
      JSON.parse('{"__proto__": {"text": "b"}, "constructor": {"text": "c"}}'),
    );
    assert.equal(Object.getOwnPropertyDescriptor(copy, '__proto__').value.inputs.text, 'b');
    assert.equal(copy.constructor.inputs.text, 'c');
  });

  it('reads file references from one, an array, or an await-job result', () => {
    const ref = { filename: 'a.png', subfolder: 's', type: 'output' };
    assert.deepEqual(referencesOf(ref), [ref]);
    assert.deepEqual(referencesOf([ref, { filename: 'b.png' }]), [
      ref,
      { filename: 'b.png', subfolder: '', type: 'output' },
    ]);
    assert.deepEqual(referencesOf({ files: [ref], outputs: {} }), [ref]);
    // A Comfy API v2 output keeps the asset id it is downloaded by; anything but text is left out.
    const v2 = { ...ref, asset_id: 'eyJqIjo.c2ln' };
    assert.deepEqual(referencesOf({ files: [v2, { ...ref, asset_id: 7 }] }), [v2, ref]);
    assert.throws(() => referencesOf(42), /must be a file reference/);
  });

  it("keeps a v2 output's asset_id (what downloads it), and only a text of bounded length", () => {
    // An await's result on a Comfy API v2 server: each file names its asset (as the real proxy's outputs do).
    const ref = { filename: 'v2_00001_.png', subfolder: '', type: 'output', asset_id: 'eyJqIjogIjEifQ.c2ln' };
    assert.deepEqual(referencesOf({ files: [ref] }), [ref]);
    assert.deepEqual(referencesOf({ filename: 'a.png', asset_id: 7 }), [
      { filename: 'a.png', subfolder: '', type: 'output' },
    ]);
    assert.deepEqual(referencesOf({ filename: 'a.png', asset_id: 'x'.repeat(2049) }), [
      { filename: 'a.png', subfolder: '', type: 'output' },
    ]);
    const inherited = Object.create({ asset_id: 'from-the-prototype' });
    inherited.filename = 'a.png';
    assert.deepEqual(referencesOf(inherited), [{ filename: 'a.png', subfolder: '', type: 'output' }]);
  });

  it('keeps saved files inside their directory', () => {
    assert.equal(targetPath('/tmp/out', 'a.png'), '/tmp/out/a.png');
    for (const name of ['', '.', '..', '../a', 'a/b', 'a\\b', '/etc/x', 'a\u0000b', 'a\nb']) {
      assert.throws(
        () => targetPath('/tmp/out', name),
        /would leave the download directory/,
        JSON.stringify(name),
      );
    }
  });

  it('reads prompt ids from either queue element shape', () => {
    assert.equal(promptIdOfQueueElement([3, 'abc', {}, {}, []]), 'abc');
    assert.equal(promptIdOfQueueElement({ prompt_id: 'def' }), 'def');
    assert.equal(promptIdOfQueueElement({ id: 'ghi' }), 'ghi');
    assert.equal(promptIdOfQueueElement('x'), undefined);
  });
});

describe('Limiter', () => {
  const { Limiter } = require('../../dist/generation/jobs/limiter');

  it('runs at most its concurrency at a time, the rest in arrival order, and survives a failing task', async () => {
    const limiter = new Limiter(3);
    let active = 0;
    let most = 0;
    const order = [];
    const task = (index) => async () => {
      active += 1;
      most = Math.max(most, active);
      await new Promise((resolve) => setTimeout(resolve, 5));
      active -= 1;
      order.push(index);
      if (index === 4) throw new Error('task 4 fails');
      return index;
    };
    const results = await Promise.allSettled(Array.from({ length: 10 }, (_, i) => limiter.run(task(i))));
    assert.equal(most, 3);
    assert.deepEqual(order.slice(0, 3).sort(), [0, 1, 2]);
    assert.equal(results[4].status, 'rejected');
    assert.deepEqual(
      results.filter((r) => r.status === 'fulfilled').map((r) => r.value),
      [0, 1, 2, 3, 5, 6, 7, 8, 9],
    );
    assert.equal(limiter.active, 0);
  });
});

describe('RecentMap (the ended jobs and the cancels a config node remembers)', () => {
  const { RecentMap } = require('../../dist/generation/jobs/recent-map');

  it('remembers at least its capacity of the latest keys, at most twice it, and a key set again is recent', () => {
    const recent = new RecentMap(100);
    for (let i = 0; i < 1000; i++) {
      recent.set(`job-${i}`, i);
      // The first key is set again now and then, so it stays among the latest.
      if (i % 50 === 0) recent.set('job-0', 0);
    }
    for (let i = 900; i < 1000; i++) assert.equal(recent.get(`job-${i}`), i);
    assert.equal(recent.has('job-0'), true);
    assert.equal(recent.has('job-500'), false);
    assert.ok(recent.size >= 100 && recent.size <= 200, `size ${recent.size}`);
    recent.delete('job-999');
    assert.equal(recent.has('job-999'), false);
    assert.equal(recent.get('job-999'), undefined);
  });
});
