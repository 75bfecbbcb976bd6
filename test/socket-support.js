'use strict';
// Shared by the socket-* and await-* tests: workflows the sandbox's event runner understands, and waiting.

const KEY = 'sk-test-7c1f0e9a2b';

/** A small text-to-image workflow: loader, sampler (progress + previews), save (executed with files). */
function workflow(extra = {}, options = {}) {
  return {
    1: { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: 'model.safetensors' } },
    2: { class_type: 'KSampler', inputs: { steps: options.steps ?? 3, seed: 1, model: ['1', 0] } },
    3: {
      class_type: 'SaveImage',
      inputs: { filename_prefix: options.prefix ?? 'out', images: ['2', 0], ...options.save },
    },
    ...extra,
  };
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Polls `predicate` until true or the time is up (then fails with `what`). */
async function until(predicate, what, timeoutMs = 8000) {
  const deadline = Date.now() + timeoutMs;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

/** The file names a sandbox job's outputs name, sorted. */
function fileNames(outputs) {
  const names = [];
  for (const output of Object.values(outputs ?? {})) {
    for (const list of Object.values(output))
      if (Array.isArray(list)) for (const f of list) names.push(f.filename);
  }
  return names.sort();
}

module.exports = { KEY, workflow, sleep, until, fileNames };
