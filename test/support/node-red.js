'use strict';
// Shared by the Node-RED-level tests: Node-RED's own nodes from the Node-RED under test, and a status recorder.
const path = require('node:path');
const helper = require('node-red-node-test-helper');

/** Node-RED's own nodes from the Node-RED under test (NODE_RED_PATH selects Node-RED 5 in CI). */
function coreNode(relative) {
  const base = process.env.NODE_RED_PATH ? path.dirname(process.env.NODE_RED_PATH) : __dirname;
  return require(require.resolve(`@node-red/nodes/core/${relative}`, { paths: [base] }));
}

/** Records every status the node sets. */
function statuses(id) {
  const node = helper.getNode(id);
  const seen = [];
  const original = node.status.bind(node);
  node.status = (status) => {
    seen.push(status);
    return original(status);
  };
  return seen;
}

/** A text-to-image workflow in API format that the sandbox accepts. */
function textToImage() {
  return {
    4: { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: 'v1-5-pruned-emaonly.safetensors' } },
    5: { class_type: 'EmptyLatentImage', inputs: { width: 512, height: 512, batch_size: 1 } },
    6: { class_type: 'CLIPTextEncode', inputs: { text: 'a red fox', clip: ['4', 1] } },
    7: { class_type: 'CLIPTextEncode', inputs: { text: 'blurry', clip: ['4', 1] } },
    3: {
      class_type: 'KSampler',
      inputs: {
        seed: 1,
        steps: 20,
        cfg: 7,
        sampler_name: 'euler',
        scheduler: 'normal',
        denoise: 1,
        model: ['4', 0],
        positive: ['6', 0],
        negative: ['7', 0],
        latent_image: ['5', 0],
      },
    },
    8: { class_type: 'VAEDecode', inputs: { samples: ['3', 0], vae: ['4', 2] } },
    9: { class_type: 'SaveImage', inputs: { filename_prefix: 'fox', images: ['8', 0] } },
  };
}

/**
 * Presses an inject node's button through its admin endpoint (`press` sends the request and answers its HTTP status)
 * until the node is there. Node-RED answers a deploy before it starts the new flows (flows/index.js: "Return the new
 * revision asynchronously to the actual start"), and the endpoint answers 404 until the node has started.
 */
async function pressInject(press, timeoutMs = 10_000) {
  let status = await press();
  for (const started = Date.now(); status === 404 && Date.now() - started < timeoutMs; status = await press())
    await new Promise((resolve) => setTimeout(resolve, 100));
  return status;
}

module.exports = { coreNode, statuses, textToImage, pressInject };
