'use strict';
// The sandbox as a process of its own (dist/sandbox/cli.js), as `npm start` and the browser tests run it.
const assert = require('node:assert');
const { parseCliOptions } = require('../../dist/sandbox/cli');
const { startSandboxProcess, stopProcesses } = require('../../scripts/start.js');

describe('sandbox CLI', function () {
  it('reads its options from arguments first, then the environment', () => {
    assert.deepStrictEqual(parseCliOptions([], {}), {
      port: 0,
      workflows: 42,
      generationKey: undefined,
      automationKey: undefined,
    });
    assert.deepStrictEqual(
      parseCliOptions(['--port', '8190', '--workflows=7'], {
        SANDBOX_PORT: '9',
        SANDBOX_GENERATION_KEY: 'g',
      }),
      { port: 8190, workflows: 7, generationKey: 'g', automationKey: undefined },
    );
    assert.throws(() => parseCliOptions(['--port', 'x'], {}), /--port must be a whole number/);
    assert.throws(() => parseCliOptions(['--colour', 'red'], {}), /unknown option --colour/);
    assert.throws(() => parseCliOptions(['--workflows'], {}), /--workflows needs a value/);
  });

  it('starts on a free port, serves both services with the keys it was given, and stops on SIGINT', async () => {
    const sandbox = await startSandboxProcess({
      generationKey: 'cli-gen-key',
      automationKey: 'cli-auto-key',
      workflows: 5,
    });
    try {
      assert.match(sandbox.url, /^http:\/\/127\.0\.0\.1:\d+$/);
      const list = await fetch(`${sandbox.url}/api/v1/workflows`, {
        headers: { 'X-AUTOMATION-API-KEY': 'cli-auto-key' },
      });
      assert.strictEqual(list.status, 200);
      assert.strictEqual((await list.json()).data.length, 5);
      const refused = await fetch(`${sandbox.url}/api/v1/workflows`, {
        headers: { 'X-AUTOMATION-API-KEY': 'wrong' },
      });
      assert.strictEqual(refused.status, 401);
      const queue = await fetch(`${sandbox.url}/api/queue`, { headers: { 'X-API-Key': 'cli-gen-key' } });
      assert.strictEqual(queue.status, 200);
      assert.strictEqual((await fetch(`${sandbox.url}/api/queue`)).status, 401);
    } finally {
      await stopProcesses([sandbox.child], 3000);
    }
    assert.strictEqual(sandbox.child.exitCode, 0, 'the sandbox did not stop cleanly on SIGINT');
    await assert.rejects(fetch(`${sandbox.url}/api/queue`), 'the sandbox still answers after SIGINT');
  });
});
