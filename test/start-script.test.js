'use strict';
// scripts/start.js (`npm start`) as a user meets it: the user dir it prepares (links that Windows accepts,
// credentials that are never plain text, even a key typed in the editor), the sandbox process it starts
// (its output not kept once it is up), and the second sandbox it starts for example 10's server pool (server B
// there, every other config node at the first; both stopped on Ctrl-C).
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { PassThrough } = require('node:stream');
const start = require('../scripts/start.js');

const SERVICES = {
  generation: { url: 'http://127.0.0.1:9', apiKey: 'k' },
  automation: { url: 'http://127.0.0.1:9', apiKey: 'k' },
};
const TYPED_KEY = 'typed-in-the-editor-key-5521';

describe('npm start (scripts/start.js)', function () {
  let tmp;
  let userDir;
  /** A stand-in for the dashboard package (the user dir links it; Node-RED loads nothing from it). */
  let dashboardCopy;

  beforeEach(() => {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'graph-gen-start-'));
    userDir = path.join(tmp, 'user');
    dashboardCopy = path.join(tmp, 'dashboard');
    fs.mkdirSync(dashboardCopy);
    fs.writeFileSync(path.join(dashboardCopy, 'package.json'), '{"name":"@flowfuse/node-red-dashboard"}');
  });
  afterEach(() => fs.rmSync(tmp, { recursive: true, force: true }));

  const prepare = (options = {}) =>
    start.prepareUserDir(userDir, {
      port: 1880,
      services: SERVICES,
      dashboard: { devCopy: dashboardCopy, log: () => undefined },
      ...options,
    });
  const secret = () => fs.readFileSync(path.join(userDir, '.credential-secret'), 'utf8').trim();
  const credentialsFile = () => path.join(userDir, 'flows_cred.json');
  const storedCredentials = () => JSON.parse(fs.readFileSync(credentialsFile(), 'utf8'));

  it('links this package and the dashboard as junctions, which Windows allows without Developer Mode', () => {
    const types = [];
    const symlink = fs.symlinkSync;
    fs.symlinkSync = (target, link, type) => {
      types.push(type);
      return symlink(target, link, type);
    };
    try {
      prepare({ flows: 'none' });
    } finally {
      fs.symlinkSync = symlink;
    }
    assert.deepEqual(types, ['junction', 'junction']);
    const linked = (name) => fs.realpathSync(path.join(userDir, 'node_modules', ...name.split('/')));
    assert.equal(linked('@graph-gen/node-red'), fs.realpathSync(path.join(__dirname, '..')));
    assert.equal(linked('@flowfuse/node-red-dashboard'), fs.realpathSync(dashboardCopy));
  });

  it('writes flows_cred.json encrypted with the user dir its own secret, and encrypts a plain one kept from before', () => {
    prepare();
    const written = storedCredentials();
    assert.deepEqual(Object.keys(written), ['$']);
    assert.doesNotMatch(JSON.stringify(written), /GRAPH_GEN_API_KEY/);
    const credentials = start.decryptCredentials(written, secret());
    assert.ok(Object.values(credentials).some((node) => node.apiKey === '${GRAPH_GEN_API_KEY}'));
    const mode = fs.statSync(path.join(userDir, '.credential-secret')).mode & 0o777;
    if (process.platform !== 'win32') assert.equal(mode, 0o600);

    // A user dir from before: edited flows, and a key typed in the editor saved in plain text.
    fs.writeFileSync(path.join(userDir, 'flows.json'), '[{"id":"cfg","type":"graph-gen-config"}]\n');
    fs.writeFileSync(credentialsFile(), JSON.stringify({ cfg: { apiKey: TYPED_KEY } }));
    assert.equal(prepare().flows, 'kept');
    assert.doesNotMatch(fs.readFileSync(credentialsFile(), 'utf8'), new RegExp(TYPED_KEY));
    assert.deepEqual(start.decryptCredentials(storedCredentials(), secret()), { cfg: { apiKey: TYPED_KEY } });

    // Kept flows whose secret is gone: said, not left to Node-RED.
    fs.rmSync(path.join(userDir, '.credential-secret'));
    assert.throws(() => prepare(), /encrypted with a secret that is no longer .* npm start -- --reset/);
  });

  it('Node-RED reads what it wrote, and saves a key typed in the editor encrypted, not in plain text', async function () {
    this.timeout(60000);
    const port = await start.freePort();
    prepare({ port, flows: 'none' });
    const logs = [];
    const nodeRed = await start.startNodeRed({
      userDir,
      port,
      stdio: ['ignore', 'pipe', 'pipe'],
      onOutput: (line) => logs.push(line),
    });
    try {
      // What the editor's Deploy sends for a config node whose key was typed.
      const deployed = await fetch(`${nodeRed.url}flows`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'node-red-deployment-type': 'full' },
        body: JSON.stringify([
          {
            id: 'cfg',
            type: 'graph-gen-config',
            baseUrl: 'http://127.0.0.1:9',
            credentials: { apiKey: TYPED_KEY },
          },
        ]),
      });
      assert.ok(deployed.ok, `deploy answered ${deployed.status}`);
      const file = fs.readFileSync(credentialsFile(), 'utf8');
      assert.doesNotMatch(file, new RegExp(TYPED_KEY), 'the typed key is in flows_cred.json in plain text');
      assert.deepEqual(start.decryptCredentials(JSON.parse(file), secret()).cfg, { apiKey: TYPED_KEY });
      const complaints = logs.filter((line) => /\[(warn|error)\].*(credential|decrypt)/i.test(line));
      assert.deepEqual(complaints, []);
    } finally {
      await start.stopProcesses([nodeRed.child]);
    }
  });

  it('passes the sandbox its stderr on once it is up, and keeps only the last of it when it fails to start', async () => {
    const script = path.join(tmp, 'stand-in.js');
    fs.writeFileSync(
      script,
      `process.stdout.write('graph-gen sandbox listening at http://127.0.0.1:1\\n');
       setTimeout(() => process.stderr.write('later trouble\\n'), 50);
       setInterval(() => undefined, 1000);`,
    );
    const errorOutput = new PassThrough();
    let passedOn = '';
    errorOutput.on('data', (data) => (passedOn += data));
    const sandbox = await start.startSandboxProcess({ script, errorOutput });
    try {
      assert.equal(sandbox.url, 'http://127.0.0.1:1');
      for (let wait = 0; wait < 250 && !passedOn.includes('later trouble'); wait++) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      assert.match(passedOn, /later trouble/, "the sandbox's stderr after it was up was not passed on");
    } finally {
      await start.stopProcesses([sandbox.child], 2000);
    }

    const failing = path.join(tmp, 'failing.js');
    fs.writeFileSync(
      failing,
      `process.stderr.write('x'.repeat(300 * 1024));
       process.stderr.write('the reason it stopped\\n', () => process.exit(3));`,
    );
    await assert.rejects(start.startSandboxProcess({ script: failing, errorOutput }), (error) => {
      assert.match(error.message, /^the sandbox stopped \(exit 3\) before it listened:/);
      assert.match(error.message, /the reason it stopped\n$/);
      assert.ok(error.message.length < 70 * 1024, `${error.message.length} characters of output kept`);
      return true;
    });
  });

  it('takes server B of the pool from GRAPH_GEN_URL_2, else GRAPH_GEN_URL, and a sandbox of its own when neither is set', async () => {
    const real = start.servicesFromEnvironment({
      GRAPH_GEN_URL: 'https://a.example',
      GRAPH_GEN_API_KEY: 'k',
    });
    assert.deepEqual(real.generation2, { url: 'https://a.example', apiKey: 'k', sandbox: false });
    const two = start.servicesFromEnvironment({
      GRAPH_GEN_URL: 'https://a.example',
      GRAPH_GEN_URL_2: 'https://b.example',
      AUTOMATION_URL: 'https://automation.example',
    });
    assert.equal(two.generation2.url, 'https://b.example');
    // Real services only: no sandbox is started, and Node-RED is told both addresses.
    const children = [];
    const { env } = await start.startServices(two, { children });
    assert.deepEqual(children, []);
    assert.equal(env.GRAPH_GEN_URL, 'https://a.example');
    assert.equal(env.GRAPH_GEN_URL_2, 'https://b.example');
    assert.equal(env.GRAPH_GEN_TRUSTED_ORIGINS, undefined);

    assert.equal(start.servicesFromEnvironment({}).generation2.sandbox, true);
    assert.throws(
      () => start.servicesFromEnvironment({ GRAPH_GEN_URL_2: 'https://b.example' }),
      /GRAPH_GEN_URL_2 is set without GRAPH_GEN_URL/,
    );
  });

  it("starts a second sandbox for the pool's server B: server B points at it, every other config node at the first", async function () {
    this.timeout(30000);
    const children = [];
    try {
      const services = start.servicesFromEnvironment({});
      const { env } = await start.startServices(services, { children });
      assert.equal(children.length, 2, 'not two sandbox processes');
      assert.notEqual(env.GRAPH_GEN_URL_2, env.GRAPH_GEN_URL);
      // Both answer with the one key every generation config node reads (${GRAPH_GEN_API_KEY}).
      for (const url of [env.GRAPH_GEN_URL, env.GRAPH_GEN_URL_2]) {
        const queue = await fetch(`${url}/api/queue`, { headers: { 'X-API-Key': env.GRAPH_GEN_API_KEY } });
        assert.equal(queue.status, 200, `${url} answered ${queue.status}`);
      }
      // Each has a storage host of its own, which Node-RED must trust to follow its downloads' redirects.
      const origins = env.GRAPH_GEN_TRUSTED_ORIGINS.split(',');
      assert.equal(new Set(origins).size, 2, env.GRAPH_GEN_TRUSTED_ORIGINS);

      // What Node-RED makes of the deployed examples' addresses (a whole-property ${VAR} from its environment).
      prepare({ services });
      const flows = JSON.parse(fs.readFileSync(path.join(userDir, 'flows.json'), 'utf8'));
      const address = (node) => node.baseUrl.replace(/^\$\{(\S+)\}$/, (_, name) => env[name]);
      const pools = flows.filter((node) => node.type === 'graph-gen-pool');
      assert.equal(pools.length, 1, 'one pool among the deployed examples');
      const configs = flows.filter((node) => node.type === 'graph-gen-config');
      const member = (slot) => configs.find((config) => config.id === pools[0][slot]);
      assert.equal(member('server1').name, 'server A');
      assert.equal(member('server2').name, 'server B');
      assert.equal(address(member('server2')), env.GRAPH_GEN_URL_2);
      const others = configs.filter((config) => config !== member('server2'));
      assert.ok(others.length >= 2, "server A and the other examples' config node");
      for (const config of others) assert.equal(address(config), env.GRAPH_GEN_URL, config.name);
      // Server B's key is the same ${GRAPH_GEN_API_KEY}, which the second sandbox takes.
      const credentials = start.decryptCredentials(storedCredentials(), secret());
      assert.equal(credentials[member('server2').id].apiKey, '${GRAPH_GEN_API_KEY}');
    } finally {
      await start.stopProcesses(children, 2000);
    }
    assert.ok(children.every((child) => child.exitCode !== null || child.signalCode !== null));
  });

  it('npm start runs both sandboxes beside Node-RED, says where, and Ctrl-C stops them all', async function () {
    this.timeout(90000);
    const port = await start.freePort();
    const env = { ...process.env, PORT: String(port), NODE_RED_USER_DIR: userDir };
    for (const name of ['GRAPH_GEN_URL', 'GRAPH_GEN_URL_2', 'AUTOMATION_URL', 'GRAPH_GEN_API_KEY'])
      delete env[name];
    const script = spawn(process.execPath, [path.join(__dirname, '..', 'scripts', 'start.js')], {
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    script.stdout.on('data', (data) => (output += data));
    script.stderr.on('data', (data) => (output += data));
    const exited = new Promise((resolve) => script.once('exit', (code, signal) => resolve({ code, signal })));
    try {
      for (let waited = 0; !/Ctrl-C stops/.test(output); waited += 100) {
        assert.ok(waited < 80000 && script.exitCode === null, `npm start did not start:\n${output}`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      const first = /generation service: +the sandbox at (http:\/\/\S+)/.exec(output)?.[1];
      const second = /pool's server B: +the sandbox at (http:\/\/\S+) \(example 10\)/.exec(output)?.[1];
      assert.ok(first && second, output);
      assert.notEqual(first, second);
      // A generation server with a key: the queue without one is refused, which only a sandbox up says.
      for (const url of [first, second]) assert.equal((await fetch(`${url}/api/queue`)).status, 401);
      script.kill('SIGINT');
      assert.deepEqual(await exited, { code: 0, signal: null });
      for (const url of [first, second, `http://127.0.0.1:${port}/`]) {
        await assert.rejects(fetch(url), TypeError, `${url} still answers after Ctrl-C`);
      }
    } finally {
      if (script.exitCode === null) {
        script.kill('SIGINT');
        await exited;
      }
    }
  });
});
