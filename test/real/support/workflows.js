'use strict';
// What both real-server suites (test/real on today's API, test/real-v2 on Comfy API v2) share: waiting, unique
// names and colours, and the workflows they run, all image-only (no model weights, CPU only).
const crypto = require('node:crypto');

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Polls `check` (sync or async) until it returns a truthy value, which it resolves to; fails after `ms`. */
async function until(check, what, ms = 15_000, every = 50) {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(every);
  }
}

/** A unique filename prefix, `tag` first (ComfyUI numbers files per prefix; unique ones keep tests apart). */
function uniquePrefix(tag, name) {
  return `${tag}-${name}-${Date.now().toString(36)}${crypto.randomBytes(2).toString('hex')}`;
}

/**
 * A unique colour: ComfyUI caches every node's result by its inputs, and a workflow it has run before would
 * finish at once from that cache.
 */
function uniqueColor() {
  return crypto.randomInt(0, 16_777_216);
}

/** EmptyImage -> SaveImage "9": about 0.1 s. */
function quickJob(filenamePrefix, { size = 16 } = {}) {
  return {
    1: {
      class_type: 'EmptyImage',
      inputs: { width: size, height: size, batch_size: 1, color: uniqueColor() },
    },
    9: { class_type: 'SaveImage', inputs: { filename_prefix: filenamePrefix, images: ['1', 0] } },
  };
}

/**
 * The slow graph: EmptyImage `size`² -> `blurs` ImageBlur (radius 15, about 1.2 s each on a 2-core machine at
 * 256²) -> SaveImage "9". A chain of short nodes rather than one long one: an interrupt or a cancel takes effect
 * between nodes, so it lands within a second or so. `saveEach` adds a SaveImage after every earlier blur too
 * ("20", "21", ...): a job that sends an output every second or so, so a socket down for a while misses some.
 * `size` 64 and `radius` 3 make a job of about 0.2 s that still sends live progress.
 */
function blurJob(filenamePrefix, { blurs = 4, saveEach = false, size = 256, radius = 15 } = {}) {
  const workflow = {
    1: {
      class_type: 'EmptyImage',
      inputs: { width: size, height: size, batch_size: 1, color: uniqueColor() },
    },
  };
  let previous = '1';
  for (let index = 0; index < blurs; index++) {
    const id = String(10 + index);
    workflow[id] = {
      class_type: 'ImageBlur',
      inputs: { image: [previous, 0], blur_radius: radius, sigma: 1.0 },
    };
    if (saveEach && index < blurs - 1) {
      workflow[20 + index] = {
        class_type: 'SaveImage',
        inputs: { filename_prefix: `${filenamePrefix}-${index}`, images: [id, 0] },
      };
    }
    previous = id;
  }
  workflow[9] = {
    class_type: 'SaveImage',
    inputs: { filename_prefix: filenamePrefix, images: [previous, 0] },
  };
  return workflow;
}

module.exports = { sleep, until, uniquePrefix, uniqueColor, quickJob, blurJob };
