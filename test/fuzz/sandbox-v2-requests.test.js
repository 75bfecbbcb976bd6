'use strict';
// The v2 sandbox's readers of what clients send (a submit's body, a list's query, an upload's file_path, a Range
// header, an asset id, a workflow's core/ASSET references) against hostile input: each answers a typed value or
// the proxy's refusal, never throws, never lets a prototype word change an object, and never reads past a bound.
const assert = require('node:assert/strict');
const { fc, fuzzOptions, hostileJson, deepJson, PROTOTYPE_WORDS } = require('../support/fuzz');
const { readSubmitBody, readListQuery, readIdempotencyKey } = require('../../dist/sandbox/v2-requests');
const { OutputIds, V2Assets, checkUploadPath, inputPlace, rangeOf } = require('../../dist/sandbox/v2-assets');
const { GenerationJobs } = require('../../dist/sandbox/generation-jobs');
const { pyJson } = require('../../dist/sandbox/v2-wire');

const REFUSALS = new Set([400, 422, 500]);

describe('v2 sandbox request readers (fuzzed)', () => {
  it('a submit body is a typed request or a refusal with the status the proxy gives', () => {
    fc.assert(
      fc.property(
        hostileJson(),
        hostileJson(),
        fc.constantFrom('workflow', 'metadata', 'priority', 'extra_data', 'inputs', ...PROTOTYPE_WORDS),
        fc.integer({ min: 0, max: 400 }),
        (workflow, other, key, depth) => {
          const text = deepJson(depth, JSON.stringify({ workflow, [key]: other }), 'workflow');
          const read = readSubmitBody(Buffer.from(text));
          if (read.ok) {
            assert.equal(typeof read.value.workflow, 'object');
            assert.ok(!Array.isArray(read.value.workflow));
            if (read.value.metadata !== undefined) assert.ok(Buffer.byteLength(read.value.metadata) <= 1024);
            if (read.value.priority !== undefined) assert.ok(Number.isInteger(read.value.priority));
            if (read.value.extraData !== undefined)
              assert.deepEqual(Object.keys(read.value.extraData), ['api_key_comfy_org']);
          } else {
            assert.ok(REFUSALS.has(read.refusal.status), JSON.stringify(read.refusal));
            if (!read.refusal.plain) assert.equal(typeof read.refusal.message, 'string');
          }
          assert.equal({}.polluted, undefined);
        },
      ),
      fuzzOptions(300),
    );
    assert.equal(readSubmitBody(undefined).refusal.message, 'Body must be JSON.', 'a body past the limit');
  });

  it('a list query is a limit of 1..100 and known statuses, or a 400', () => {
    fc.assert(
      fc.property(
        fc.oneof(fc.string({ maxLength: 12 }), fc.integer().map(String), fc.constant(undefined)),
        fc.oneof(
          fc.string({ maxLength: 30 }),
          fc.constantFrom('queued,running', 'expired', ' ,'),
          fc.constant(undefined),
        ),
        (limit, status) => {
          const query = new URLSearchParams();
          if (limit !== undefined) query.set('limit', limit);
          if (status !== undefined) query.set('status', status);
          const read = readListQuery(query);
          if (read.ok) {
            assert.ok(Number.isInteger(read.value.limit) && read.value.limit >= 1 && read.value.limit <= 100);
          } else assert.equal(read.refusal.status, 400);
        },
      ),
      fuzzOptions(300),
    );
  });

  it('an Idempotency-Key is 1..255 characters or refused', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 300 }), (key) => {
        const read = readIdempotencyKey(key);
        assert.equal(read.ok, key.length > 0 && [...key].length <= 255);
      }),
      fuzzOptions(200),
    );
  });

  it('an upload path never leaves its root: no `..`, nothing absolute', () => {
    fc.assert(
      fc.property(
        fc.array(fc.constantFrom('input', 'models', 'loras', '..', '.', '', 'a', 'b.png', '/', '\\', 'c d'), {
          maxLength: 6,
        }),
        (parts) => {
          const filePath = parts.join('/');
          const check = checkUploadPath(filePath);
          if (!check.ok) return assert.equal(typeof check.message, 'string');
          assert.ok(!check.norm.split('/').includes('..'), check.norm);
          // A path the check lets through may still be one ComfyUI refuses (the proxy then answers 500).
          const place = inputPlace(check.norm);
          if (!place) return;
          assert.ok(place.filename && !place.filename.includes('/'), JSON.stringify(place));
          assert.ok(!place.subfolder.startsWith('/') && !place.subfolder.split('/').includes('..'));
        },
      ),
      fuzzOptions(300),
    );
  });

  it('a Range is bytes within the file, or refused (416 upstream)', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc
            .tuple(fc.option(fc.nat(2000)), fc.option(fc.nat(2000)))
            .map(([a, b]) => `bytes=${a ?? ''}-${b ?? ''}`),
          fc.string({ maxLength: 20 }),
        ),
        fc.nat(1500),
        (header, size) => {
          const range = rangeOf(header, size);
          if (!range) return;
          assert.ok(range.start >= 0 && range.start < size, JSON.stringify(range));
          assert.ok(range.count >= 1 && range.start + range.count <= size, JSON.stringify(range));
        },
      ),
      fuzzOptions(500),
    );
  });

  it('an asset id names a file only when this sandbox minted it', () => {
    const ids = new OutputIds();
    const other = new OutputIds();
    fc.assert(
      fc.property(fc.string({ maxLength: 40 }), fc.string({ maxLength: 40 }), (jobId, filename) => {
        const ref = { filename, subfolder: '', type: 'output' };
        const id = ids.mint(jobId, ref);
        assert.deepEqual(ids.read(id), { ...ref, jobId });
        assert.equal(other.read(id), undefined);
        assert.equal(ids.read(`${id}x`), undefined);
        assert.equal(ids.read(filename), undefined);
      }),
      fuzzOptions(200),
    );
  });

  it('resolving core/ASSET references keeps every other value, prototype words as own keys', () => {
    const assets = new V2Assets({ jobs: new GenerationJobs(), uploads: [], url: '', reachable: true }, 1000);
    fc.assert(
      fc.property(hostileJson(), fc.boolean(), (value, withRef) => {
        const workflow = withRef
          ? { 1: { inputs: { image: { __type: 'core/ASSET', info: value } } } }
          : value;
        const { workflow: resolved, missing } = assets.resolveWorkflow(workflow);
        if (!withRef) {
          assert.equal(pyJson(resolved), pyJson(value));
          assert.equal(missing.length, 0);
        } else assert.equal(missing.length, 1, 'nothing uploaded: the reference is missing');
        assert.equal({}.polluted, undefined);
      }),
      fuzzOptions(300),
    );
  });
});
