'use strict';
// The pool's pure parts (src/generation/pool/): the order members are tried in (pool-routing.ts orderToTry, for
// each strategy: who is up, able, with fewest jobs ahead, ties in turns) and what a workflow needs of a server and
// what one server lacks of it (needs.ts needsOf/lacksOf), against the sandbox's node definitions as a server
// answers them; and a member's reachability from its queue reads (member-watch.ts). The pool's behaviour with real
// servers is pool.test.js and pool-failover.test.js beside it.
const assert = require('node:assert/strict');
const { orderToTry, strategyOf, POOL_STRATEGIES } = require('../../../dist/generation/pool/pool-routing');
const { needsOf, lacksOf } = require('../../../dist/generation/pool/needs');
const { defaultNodeDefinitions } = require('../../../dist/sandbox/generation-service');
const { textToImage } = require('../../support/node-red');
const { until } = require('../../support/sockets');

/** A member as the pool sees it: up, able, nothing ahead unless said. */
const view = (ahead = 0, reachability = 'up', able = true) => ({ reachability, able, ahead });

describe('pool routing (orderToTry)', () => {
  it('soonest: the fewest jobs ahead first, whatever the listed order', () => {
    assert.deepEqual(orderToTry([view(3), view(0), view(1)], 'soonest', 0), [1, 2, 0]);
    assert.deepEqual(orderToTry([view(2), view(5), view(2), view(0)], 'soonest', 0), [3, 0, 2, 1]);
  });

  it('soonest: ties take turns, from the member after the last chosen', () => {
    const idle = [view(), view(), view()];
    assert.deepEqual(orderToTry(idle, 'soonest', 0), [0, 1, 2]);
    assert.deepEqual(orderToTry(idle, 'soonest', 1), [1, 2, 0]);
    assert.deepEqual(orderToTry(idle, 'soonest', 2), [2, 0, 1]);
    // A turn past the end, or below zero, wraps.
    assert.deepEqual(orderToTry(idle, 'soonest', 4), [1, 2, 0]);
    assert.deepEqual(orderToTry(idle, 'soonest', -1), [2, 0, 1]);
    // Only the tied ones take turns; one with more ahead stays behind them.
    assert.deepEqual(orderToTry([view(1), view(0), view(0)], 'soonest', 2), [2, 1, 0]);
  });

  it('soonest: nine choices in a row, each counted as it is made, spread 3/3/3 over alike members', () => {
    const views = [view(), view(), view()];
    let turn = 0;
    const chosen = [0, 0, 0];
    for (let job = 0; job < 9; job++) {
      const [first] = orderToTry(views, 'soonest', turn);
      chosen[first] += 1;
      views[first].ahead += 1;
      turn = first + 1;
    }
    assert.deepEqual(chosen, [3, 3, 3]);
  });

  it('turns: plain turns among those up, however long their queues', () => {
    const views = [view(9), view(0), view(4)];
    assert.deepEqual(orderToTry(views, 'turns', 0), [0, 1, 2]);
    assert.deepEqual(orderToTry(views, 'turns', 1), [1, 2, 0]);
    assert.deepEqual(orderToTry(views, 'turns', 2), [2, 0, 1]);
  });

  it('first: the listed order among those up (failover only), whatever the turn and the queues', () => {
    const views = [view(9), view(0), view(4)];
    for (const turn of [0, 1, 2, 7]) assert.deepEqual(orderToTry(views, 'first', turn), [0, 1, 2]);
    assert.deepEqual(orderToTry([view(0, 'down'), view(5), view(0)], 'first', 0), [1, 2, 0]);
  });

  it('those up first, then those not heard of yet, then those down (a last resort), each in listed order', () => {
    const views = [view(0, 'down'), view(0, 'unknown'), view(7, 'up'), view(0, 'down'), view(0, 'unknown')];
    for (const strategy of POOL_STRATEGIES) {
      for (const turn of [0, 1, 3]) {
        assert.deepEqual(orderToTry(views, strategy, turn), [2, 1, 4, 0, 3], `${strategy}, turn ${turn}`);
      }
    }
  });

  it('a member not able to run the workflow is never in the order; none able is an empty order', () => {
    const views = [view(0, 'up', false), view(3), view(0, 'down', false), view(0, 'unknown')];
    for (const strategy of POOL_STRATEGIES) assert.deepEqual(orderToTry(views, strategy, 0), [1, 3]);
    assert.deepEqual(orderToTry([view(0, 'up', false)], 'soonest', 0), []);
    assert.deepEqual(orderToTry([], 'soonest', 5), []);
    assert.deepEqual(orderToTry([], 'first', 0), []);
  });

  it('a strategy setting names one of the three; anything else is the default, soonest', () => {
    assert.deepEqual(POOL_STRATEGIES, ['soonest', 'turns', 'first']);
    for (const strategy of POOL_STRATEGIES) assert.equal(strategyOf(strategy), strategy);
    for (const other of [undefined, '', 'Turns', 'random', 'toString', '__proto__', 1, null, {}, ['first']])
      assert.equal(strategyOf(other), 'soonest', JSON.stringify(other));
  });
});

describe('what a workflow needs of a server (needsOf, lacksOf)', () => {
  const definitions = defaultNodeDefinitions();

  it('needs every node class it uses once, and every model file its inputs name, by class and input', () => {
    const needs = needsOf(textToImage());
    assert.deepEqual(needs.classTypes.sort(), [
      'CLIPTextEncode',
      'CheckpointLoaderSimple',
      'EmptyLatentImage',
      'KSampler',
      'SaveImage',
      'VAEDecode',
    ]);
    assert.deepEqual(needs.models, [
      { classType: 'CheckpointLoaderSimple', input: 'ckpt_name', file: 'v1-5-pruned-emaonly.safetensors' },
    ]);
  });

  it('a model file is a text input ending in a model extension; links, numbers, images and prompts are not', () => {
    const workflow = {
      1: {
        class_type: 'LoraLoader',
        inputs: { lora_name: 'detail.SAFETENSORS', model: ['2', 0], strength: 1 },
      },
      2: { class_type: 'UpscaleModelLoader', inputs: { model_name: 'x4/RealESRGAN.pth' } },
      3: { class_type: 'LoadImage', inputs: { image: 'photo.png' } },
      4: { class_type: 'CLIPTextEncode', inputs: { text: 'a fox' } },
      5: { class_type: 'UnetLoaderGGUF', inputs: { unet_name: 'flux-Q4.gguf', weight_dtype: 'default' } },
      6: { class_type: 'VAELoader', inputs: { vae_name: 'ae.sft' } },
      7: {
        class_type: 'Other',
        inputs: { file: 'notes.txt', ckpt: 'old.ckpt', bin: 'clip.bin', onnx: 'm.onnx' },
      },
    };
    assert.deepEqual(
      needsOf(workflow).models.map((model) => `${model.classType}.${model.input}=${model.file}`),
      [
        'LoraLoader.lora_name=detail.SAFETENSORS',
        'UpscaleModelLoader.model_name=x4/RealESRGAN.pth',
        'UnetLoaderGGUF.unet_name=flux-Q4.gguf',
        'VAELoader.vae_name=ae.sft',
        'Other.ckpt=old.ckpt',
        'Other.bin=clip.bin',
        'Other.onnx=m.onnx',
      ],
    );
  });

  it('a server with every class and the model listed lacks nothing', () => {
    assert.deepEqual(lacksOf(needsOf(textToImage()), definitions), []);
    const lora = textToImage();
    lora[10] = { class_type: 'LoraLoader', inputs: { lora_name: 'detail.safetensors', model: ['4', 0] } };
    assert.deepEqual(lacksOf(needsOf(lora), definitions), []);
  });

  it('names each class it lacks and each model file missing from its choices, with the class and input', () => {
    const workflow = textToImage();
    workflow[4].inputs.ckpt_name = 'flux-dev.safetensors';
    workflow[20] = { class_type: 'FluxGuidance', inputs: { guidance: 3.5 } };
    workflow[21] = { class_type: 'UpscaleModelLoader', inputs: { model_name: '4x.pth' } };
    assert.deepEqual(lacksOf(needsOf(workflow), definitions), [
      'node class FluxGuidance',
      'node class UpscaleModelLoader',
      'model file "flux-dev.safetensors" for CheckpointLoaderSimple.ckpt_name',
    ]);
  });

  it('a model input without choices (free text, a socket) is not held against the server', () => {
    const workflow = textToImage();
    workflow[6].inputs.text = 'in the style of old.ckpt';
    workflow[30] = { class_type: 'CustomLoader', inputs: { path: '/models/any.safetensors' } };
    const withCustom = {
      ...definitions,
      CustomLoader: {
        ...definitions.VAEDecode,
        name: 'CustomLoader',
        input: { required: { path: ['STRING'] } },
      },
    };
    assert.deepEqual(lacksOf(needsOf(workflow), withCustom), []);
  });

  it('reads choices in the newer COMBO form ({options}) and in optional inputs', () => {
    const workflow = {
      1: { class_type: 'NewLoader', inputs: { ckpt_name: 'b.safetensors', extra: 'c.safetensors' } },
    };
    const newer = {
      NewLoader: {
        input: {
          required: { ckpt_name: ['COMBO', { options: ['a.safetensors', 'b.safetensors'] }] },
          optional: { extra: [['a.safetensors']] },
        },
        output: ['MODEL'],
        name: 'NewLoader',
      },
    };
    assert.deepEqual(lacksOf(needsOf(workflow), newer), ['model file "c.safetensors" for NewLoader.extra']);
  });

  it('a class named like a prototype member is lacked, never found on the object', () => {
    const workflow = {
      1: { class_type: 'constructor', inputs: {} },
      2: { class_type: 'toString', inputs: { ckpt_name: 'x.safetensors' } },
      3: { class_type: '__proto__', inputs: {} },
      4: { class_type: 'hasOwnProperty', inputs: {} },
    };
    assert.deepEqual(lacksOf(needsOf(workflow), definitions), [
      'node class constructor',
      'node class toString',
      'node class __proto__',
      'node class hasOwnProperty',
    ]);
  });

  it('definitions read again (a new object) are read anew: a model installed since is found', () => {
    const workflow = textToImage();
    workflow[4].inputs.ckpt_name = 'new.safetensors';
    const needs = needsOf(workflow);
    const before = defaultNodeDefinitions();
    assert.equal(lacksOf(needs, before).length, 1);
    const after = defaultNodeDefinitions();
    after.CheckpointLoaderSimple.input.required.ckpt_name[0].push('new.safetensors');
    assert.deepEqual(lacksOf(needs, after), []);
    assert.equal(lacksOf(needs, before).length, 1, 'the first read is still what it was');
  });
});

describe("a member's reachability from its queue reads (member-watch.ts)", () => {
  const { MemberWatch } = require('../../../dist/generation/pool/member-watch');
  const { GenerationConnection } = require('../../../dist/generation/connection');
  const { startSandbox } = require('../../../dist/sandbox');
  const timings = { upWithinMs: 30_000, socketWaitMs: 1_000, definitionsWaitMs: 1_000 };

  it('a stopped member is down after a read that gets no answer in its time, and up again once one answers', async () => {
    const sandbox = await startSandbox();
    const port = Number(new URL(sandbox.url).port);
    const connection = new GenerationConnection({ baseUrl: sandbox.url, partnerKeyField: 'x' });
    const watch = new MemberWatch({ id: 'c', name: 'C', connection }, timings);
    let restarted;
    try {
      await watch.readQueue(AbortSignal.timeout(5_000));
      assert.equal(watch.reachability(), 'up', 'it answered: up for upWithinMs, whatever its socket');
      await sandbox.close();
      // The refused connection is retried past the read's time (as a pool's poll gives it): no answer is down.
      await watch.readQueue(AbortSignal.timeout(100));
      assert.equal(watch.reachability(), 'down');
      // A read stopped by the pool's close tells nothing.
      const closing = new AbortController();
      const read = watch.readQueue(closing.signal);
      watch.heard();
      closing.abort(new Error('the pool closes'));
      await read;
      assert.equal(watch.reachability(), 'up');
      restarted = await startSandbox({ port });
      watch.failed();
      await watch.readQueue(AbortSignal.timeout(5_000));
      assert.equal(watch.reachability(), 'up', 'it answers again');
    } finally {
      await connection.close();
      await restarted?.close();
    }
  });

  it('a member heard by a read whose socket never opened is down once its socket finds nothing there, and a submit waiting for that socket goes on at once', async () => {
    const sandbox = await startSandbox();
    // A proxy in front that passes only REST: the handshake is answered with a refusal, the server is there.
    sandbox.faults.add({ method: 'UPGRADE', path: '/ws', status: 503 });
    const connection = new GenerationConnection({ baseUrl: sandbox.url, partnerKeyField: 'x' });
    const watch = new MemberWatch({ id: 'c', name: 'C', connection }, timings);
    try {
      await watch.readQueue(AbortSignal.timeout(5_000));
      watch.watchSocket(() => undefined);
      await until(() => watch.socketState === 'down', 'the refused handshake');
      assert.equal(watch.reachability(), 'up', 'a handshake refused says nothing of the server: heard, up');

      // Stopped now: its socket's next try is refused at the door (its reconnect is a moment away).
      await sandbox.close();
      const started = Date.now();
      await watch.socketReady(5_000);
      const waited = Date.now() - started;
      assert.equal(watch.reachability(), 'down', 'the refused try: down, though heard 0 s ago');
      assert.ok(waited < 4_000, `waited ${waited} ms for a socket to a stopped server, not the 5 s wait`);
      assert.equal(watch.member.connection.sockets().unreachable, true);
    } finally {
      await connection.close();
    }
  });
});
