'use strict';
// `npm start`: Node-RED on 127.0.0.1 with this package and every example flow deployed, talking to real services
// when GRAPH_GEN_URL / AUTOMATION_URL are set, else to the sandbox started beside it. The user dir is the
// git-ignored .node-red-user/. Stops Node-RED and the sandboxes on Ctrl-C.
//
// Example 10's server pool has a second generation server, "server B", whose address is ${GRAPH_GEN_URL_2}:
//   - GRAPH_GEN_URL not set: a second sandbox process (same key as the first), so the pool has two servers;
//   - GRAPH_GEN_URL set: GRAPH_GEN_URL_2 when that is set, else GRAPH_GEN_URL (both members on one service);
//   - GRAPH_GEN_URL_2 without GRAPH_GEN_URL: refused (server B would get the sandbox's key).
// Server B reads its key from GRAPH_GEN_API_KEY as every generation config node does; every other config node
// points at the first sandbox (or GRAPH_GEN_URL).
//
//   npm start                       examples against the sandboxes (or the services named in the environment)
//   npm start -- --reset            throw away edited flows and deploy the examples again
//   PORT=1881 npm start             another port
//   NODE_RED_DIR=<dir> npm start    another Node-RED: a folder with node_modules/node-red, or node-red itself
//
// The browser tests use the functions exported below with a temporary user dir. Past 400 lines: all of
// `npm start` (user dir, encrypted credentials, the dashboard package, both child processes) is this one
// script, run without a build step.
const { spawn, spawnSync } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');

const root = path.join(__dirname, '..');
const PACKAGE_NAME = '@graph-gen/node-red';

/** The red.js of the Node-RED to run: NODE_RED_DIR (or CI's NODE_RED_5_HOME), else this repo's dev dependency. */
function nodeRedScript(dir = process.env.NODE_RED_DIR || process.env.NODE_RED_5_HOME) {
  if (!dir) return require.resolve('node-red/red.js');
  for (const candidate of [path.join(dir, 'node_modules', 'node-red', 'red.js'), path.join(dir, 'red.js')]) {
    if (fs.existsSync(candidate)) return candidate;
  }
  throw new Error(`no Node-RED found in ${dir} (expected node_modules/node-red/red.js or red.js there)`);
}

function ensureBuilt() {
  const built = (type) => fs.existsSync(path.join(root, 'dist', 'nodes', `${type}.js`));
  const types = Object.keys(require(path.join(root, 'package.json'))['node-red'].nodes);
  if (types.every(built) && fs.existsSync(path.join(root, 'dist', 'sandbox', 'cli.js'))) return;
  process.stdout.write('building the package first (npm run build)...\n');
  const result = spawnSync('npm', ['run', 'build'], {
    cwd: root,
    stdio: 'inherit',
    shell: process.platform === 'win32',
  });
  if (result.status !== 0) throw new Error('the build failed; fix it and run npm start again');
}

/** A stable 16-hex-digit id: the same example always gets the same ids in the flows file. */
function shortId(...parts) {
  return crypto.createHash('sha256').update(parts.join('\0')).digest('hex').slice(0, 16);
}

/** Example files in Import > Examples order (file name order), each with its nodes. */
function readExamples(dir = path.join(root, 'examples')) {
  return fs
    .readdirSync(dir)
    .filter((name) => name.endsWith('.json'))
    .sort()
    .map((name) => ({
      name: name.replace(/\.json$/, ''),
      nodes: JSON.parse(fs.readFileSync(path.join(dir, name), 'utf8')),
    }));
}

function isConfigNode(node) {
  return node.type !== 'tab' && node.x === undefined && node.z === undefined;
}

/** Replaces every string in `value` that is a key of `ids` (wires, z, server, scope, links, groups...). */
function remapIds(value, ids) {
  if (typeof value === 'string') return ids.has(value) ? ids.get(value) : value;
  if (Array.isArray(value)) return value.map((item) => remapIds(item, ids));
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, remapIds(item, ids)]));
  }
  return value;
}

/**
 * One flows file from every example: each example on a tab of its own, its flow nodes given ids unique to
 * that tab. Config nodes keep their ids: the examples share one config node per service (same id, same
 * content), as they do when imported one after another through the editor.
 */
function buildFlows(examples) {
  const flows = [];
  const configIds = new Set();
  for (const example of examples) {
    const tabId = shortId('tab', example.name);
    const ids = new Map();
    for (const node of example.nodes) {
      if (node.type === 'tab') ids.set(node.id, tabId);
      else if (!isConfigNode(node)) ids.set(node.id, shortId(example.name, node.id));
    }
    const tab = example.nodes.find((node) => node.type === 'tab');
    flows.push({
      id: tabId,
      type: 'tab',
      label: tab?.label || example.name.replace(/^\d+-/, '').replace(/-/g, ' '),
      disabled: false,
      info: tab?.info || '',
    });
    for (const node of example.nodes) {
      if (node.type === 'tab') continue;
      if (isConfigNode(node)) {
        if (configIds.has(node.id)) continue;
        configIds.add(node.id);
        flows.push(node);
        continue;
      }
      flows.push({ ...remapIds(node, ids), z: tabId });
    }
  }
  return flows;
}

/**
 * Credentials for the examples' config nodes, read from the environment at run time: Node-RED replaces a
 * credential written as `${VAR}` with that variable when the node starts. Only keys actually in use are written.
 */
function buildCredentials(flows, services) {
  const credentials = {};
  for (const node of flows) {
    if (node.type === 'graph-gen-config') {
      credentials[node.id] = {};
      if (services.generation.apiKey) credentials[node.id].apiKey = '${GRAPH_GEN_API_KEY}';
      if (services.generation.partnerKey) credentials[node.id].partnerKey = '${GRAPH_GEN_PARTNER_KEY}';
    } else if (node.type === 'automation-config') {
      credentials[node.id] = {};
      if (services.automation.apiKey) credentials[node.id].apiKey = '${AUTOMATION_API_KEY}';
    }
  }
  return credentials;
}

/** The file in the user dir that holds the secret flows_cred.json is encrypted with. */
const SECRET_FILE = '.credential-secret';

/**
 * The user dir's credential secret, made on first use (32 random bytes, readable by the owner only). A secret
 * that is gone cannot be made again: credentials encrypted with it are lost, and `fresh` says so.
 */
function credentialSecret(userDir) {
  const file = path.join(userDir, SECRET_FILE);
  if (fs.existsSync(file)) return { secret: fs.readFileSync(file, 'utf8').trim(), fresh: false };
  const secret = crypto.randomBytes(32).toString('hex');
  fs.writeFileSync(file, `${secret}\n`, { mode: 0o600 });
  return { secret, fresh: true };
}

/** Node-RED's encrypted credentials file: `{"$": iv (hex) + AES-256-CTR of the JSON (base64)}`, key sha256(secret). */
function encryptCredentials(credentials, secret) {
  const key = crypto.createHash('sha256').update(secret).digest();
  const iv = crypto.randomBytes(16);
  const cipher = crypto.createCipheriv('aes-256-ctr', key, iv);
  const text = cipher.update(JSON.stringify(credentials), 'utf8', 'base64') + cipher.final('base64');
  return { $: iv.toString('hex') + text };
}

/** The credentials of an encrypted credentials file (the inverse of encryptCredentials). */
function decryptCredentials(encrypted, secret) {
  const key = crypto.createHash('sha256').update(secret).digest();
  const iv = Buffer.from(encrypted.$.slice(0, 32), 'hex');
  const decipher = crypto.createDecipheriv('aes-256-ctr', key, iv);
  return JSON.parse(decipher.update(encrypted.$.slice(32), 'base64', 'utf8') + decipher.final('utf8'));
}

function isEncrypted(credentials) {
  return Boolean(credentials) && Object.keys(credentials).length === 1 && typeof credentials.$ === 'string';
}

function writeCredentials(file, credentials, secret) {
  fs.writeFileSync(file, `${JSON.stringify(encryptCredentials(credentials, secret), null, 2)}\n`, {
    mode: 0o600,
  });
}

function settingsFile({ port }) {
  return `// Written by scripts/start.js on every start; edit that script, not this file.
module.exports = {
  uiHost: '127.0.0.1',
  uiPort: ${Number(port)},
  flowFile: 'flows.json',
  // flows_cred.json is encrypted with this user dir's own secret: npm start writes \${VAR} references there,
  // but a key typed in the editor is saved there too, and must not sit in a file in plain text.
  credentialSecret: require('node:fs').readFileSync(require('node:path').join(__dirname, '${SECRET_FILE}'), 'utf8').trim(),
  // The file nodes of the examples read and write relative to the user dir.
  fileWorkingDirectory: __dirname,
  telemetry: { enabled: false, updateNotification: false },
  diagnostics: { enabled: false, ui: false },
  editorTheme: { tours: false, projects: { enabled: false } },
  externalModules: { palette: { allowInstall: false } },
  logging: { console: { level: 'info', metrics: false, audit: false } },
};
`;
}

/** A small PNG (solid colour) so the image-to-image and inpainting examples have files to read. */
function solidPng(width, height, [r, g, b, a]) {
  const zlib = require('node:zlib');
  const crcTable = Array.from({ length: 256 }, (_, n) => {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    return c >>> 0;
  });
  const crc = (buffer) => {
    let c = 0xffffffff;
    for (const byte of buffer) c = crcTable[(c ^ byte) & 0xff] ^ (c >>> 8);
    return (c ^ 0xffffffff) >>> 0;
  };
  const chunk = (type, data) => {
    const length = Buffer.alloc(4);
    length.writeUInt32BE(data.length);
    const body = Buffer.concat([Buffer.from(type, 'ascii'), data]);
    const check = Buffer.alloc(4);
    check.writeUInt32BE(crc(body));
    return Buffer.concat([length, body, check]);
  };
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header.set([8, 6, 0, 0, 0], 8);
  const row = Buffer.concat([
    Buffer.from([0]),
    Buffer.from(Array.from({ length: width }, () => [r, g, b, a]).flat()),
  ]);
  const pixels = Buffer.concat(Array.from({ length: height }, () => row));
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', header),
    chunk('IDAT', zlib.deflateSync(pixels)),
    chunk('IEND', Buffer.alloc(0)),
  ]);
}

const DASHBOARD = '@flowfuse/node-red-dashboard';

/**
 * Folder links as junctions: on Windows a `dir` symlink needs Developer Mode or an administrator, a junction
 * does not (elsewhere the type is ignored).
 */
const LINK_TYPE = 'junction';

/** The folder of this repo's devDependency copy of the dashboard package, if installed. */
function dashboardDevCopy() {
  try {
    return path.dirname(require.resolve(`${DASHBOARD}/package.json`, { paths: [root] }));
  } catch {
    return undefined;
  }
}

/**
 * The dashboard example (08) needs FlowFuse Dashboard 2.0 in the user dir. This repo's devDependency copy is
 * linked when there is one (tests, a clone with dev dependencies: no network, the version package-lock.json
 * pins); otherwise npm installs the range package.json names into the user dir. Once there, it is left alone:
 * a user who updated it through Manage palette keeps their version.
 */
function ensureDashboard(
  userDir,
  {
    devCopy = dashboardDevCopy(),
    install = spawnSync,
    log = (line) => process.stdout.write(`${line}\n`),
  } = {},
) {
  const target = path.join(userDir, 'node_modules', ...DASHBOARD.split('/'));
  if (fs.existsSync(path.join(target, 'package.json'))) return { dashboard: 'present' };
  if (devCopy) {
    // A dangling link (the copy it pointed at has gone) would make existsSync above false: replace it.
    fs.rmSync(target, { recursive: true, force: true });
    fs.mkdirSync(path.dirname(target), { recursive: true });
    fs.symlinkSync(devCopy, target, LINK_TYPE);
    return { dashboard: 'linked' };
  }
  const range = require(path.join(root, 'package.json')).devDependencies?.[DASHBOARD] || 'latest';
  log(`installing ${DASHBOARD}@${range} into ${userDir} for the dashboard example (npm install)...`);
  const result = install(
    'npm',
    ['install', '--prefix', userDir, '--no-audit', '--no-fund', '--save', `${DASHBOARD}@${range}`],
    { cwd: userDir, stdio: 'inherit', shell: process.platform === 'win32' },
  );
  if (result.status !== 0) {
    throw new Error(
      `npm could not install ${DASHBOARD} into ${userDir} (exit ${result.status}); install it there by hand ` +
        `(npm install --prefix ${userDir} ${DASHBOARD}) or remove examples/08-prompt-to-picture-page.json`,
    );
  }
  return { dashboard: 'installed' };
}

/**
 * Prepares a user dir: settings.js, the package linked into node_modules, sample input images, and (unless the
 * user has deployed edits since, or `flows: 'keep'`) a flows file with every example. `flows: 'none'` leaves
 * the workspace empty (the browser tests import the examples themselves). The dashboard package is put in
 * either way (see ensureDashboard; `dashboard` passes it its options), so every example can be imported.
 */
function prepareUserDir(userDir, { port, services, flows = 'examples', reset = false, dashboard = {} }) {
  fs.mkdirSync(path.join(userDir, 'node_modules', '@graph-gen'), { recursive: true });
  const { secret, fresh } = credentialSecret(userDir);
  fs.writeFileSync(path.join(userDir, 'settings.js'), settingsFile({ port }));
  if (!fs.existsSync(path.join(userDir, 'package.json'))) {
    fs.writeFileSync(
      path.join(userDir, 'package.json'),
      JSON.stringify({ name: 'node-red-user', private: true }, null, 2),
    );
  }
  // Before the link below: an npm install into the user dir removes packages its package.json does not list.
  ensureDashboard(userDir, dashboard);
  const link = path.join(userDir, 'node_modules', ...PACKAGE_NAME.split('/'));
  let linked = false;
  try {
    linked = fs.realpathSync(link) === fs.realpathSync(root);
  } catch {
    linked = false;
  }
  if (!linked) {
    fs.rmSync(link, { recursive: true, force: true });
    fs.symlinkSync(root, link, LINK_TYPE);
  }
  for (const [name, colour] of [
    ['input.png', [200, 80, 40, 255]],
    ['mask.png', [255, 255, 255, 255]],
  ]) {
    const file = path.join(userDir, name);
    if (!fs.existsSync(file)) fs.writeFileSync(file, solidPng(64, 64, colour));
  }

  const flowsFile = path.join(userDir, 'flows.json');
  const credentialsFile = path.join(userDir, 'flows_cred.json');
  const stampFile = path.join(userDir, '.examples-stamp');
  if (flows === 'none') {
    fs.writeFileSync(flowsFile, '[]\n');
    writeCredentials(credentialsFile, {}, secret);
    return { flows: 'none' };
  }
  const current = fs.existsSync(flowsFile) ? fs.readFileSync(flowsFile, 'utf8') : undefined;
  const stamp = fs.existsSync(stampFile) ? fs.readFileSync(stampFile, 'utf8') : undefined;
  const digest = (text) => crypto.createHash('sha256').update(text).digest('hex');
  const edited = current !== undefined && current.trim() !== '[]' && (!stamp || digest(current) !== stamp);
  if (edited && !reset) {
    keepCredentialsEncrypted(credentialsFile, secret, fresh);
    return { flows: 'kept' };
  }
  const built = buildFlows(readExamples());
  const text = `${JSON.stringify(built, null, 2)}\n`;
  fs.writeFileSync(flowsFile, text);
  writeCredentials(credentialsFile, buildCredentials(built, services), secret);
  fs.writeFileSync(stampFile, digest(text));
  return { flows: 'examples', count: built.filter((node) => node.type === 'tab').length };
}

/**
 * The credentials of flows kept from an earlier start: a plain-text file (written before npm start encrypted
 * it, keys typed in the editor included) is encrypted in place; one encrypted with a secret that is gone
 * cannot be read, which is said rather than left to Node-RED's "Failed to decrypt credentials".
 */
function keepCredentialsEncrypted(file, secret, freshSecret) {
  if (!fs.existsSync(file)) return;
  const credentials = JSON.parse(fs.readFileSync(file, 'utf8'));
  if (!isEncrypted(credentials)) {
    writeCredentials(file, credentials, secret);
    return;
  }
  if (freshSecret) {
    throw new Error(
      `${file} is encrypted with a secret that is no longer in ${path.dirname(file)}/${SECRET_FILE}: ` +
        'run npm start -- --reset to deploy the examples again (keys typed in the editor must be typed again)',
    );
  }
}

/** The most of the sandbox's output kept to say why it did not start. */
const EARLY_OUTPUT_CHARS = 64 * 1024;

/**
 * Starts dist/sandbox/cli.js (or `script`, which must print the same `listening at <url>` line) and resolves
 * with its address once it listens. Until then its output is kept (the last 64 KiB) for the error that says
 * why it did not start; from then on its stderr goes to `errorOutput` and nothing of it is kept.
 */
function startSandboxProcess({
  generationKey,
  automationKey,
  workflows = 42,
  port = 0,
  script = path.join(root, 'dist', 'sandbox', 'cli.js'),
  errorOutput = process.stderr,
} = {}) {
  const args = [script, '--port', String(port), '--workflows', String(workflows)];
  // Keys through the environment, not the command line: `ps` shows every process's arguments.
  const env = {
    ...process.env,
    SANDBOX_GENERATION_KEY: generationKey || '',
    SANDBOX_AUTOMATION_KEY: automationKey || '',
  };
  const child = spawn(process.execPath, args, { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] });
  return new Promise((resolve, reject) => {
    let output = '';
    const keep = (data) => {
      output = (output + data).slice(-EARLY_OUTPUT_CHARS);
    };
    const onExit = (code) =>
      reject(new Error(`the sandbox stopped (exit ${code}) before it listened:\n${output}`));
    const onData = (data) => {
      keep(data);
      const match = /listening at (http:\/\/\S+)/.exec(output);
      if (match) {
        // A sandbox with a generation key names its storage host before: Node-RED must trust it.
        const storage = /storage host: (http:\/\/\S+)/.exec(output);
        child.stdout.off('data', onData);
        child.stderr.off('data', keep);
        child.off('exit', onExit);
        output = '';
        child.stdout.resume();
        child.stderr.pipe(errorOutput, { end: false });
        resolve({ child, url: match[1], storageUrl: storage?.[1] });
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', keep);
    child.on('error', reject);
    child.on('exit', onExit);
  });
}

/** Starts Node-RED on a prepared user dir; resolves once its admin API answers (signed in or not). */
function startNodeRed({ userDir, port, env = {}, stdio = 'inherit', onOutput, timeoutMs = 60000 }) {
  const child = spawn(process.execPath, [nodeRedScript(), '--userDir', userDir, '--port', String(port)], {
    cwd: userDir,
    env: { ...process.env, ...env },
    stdio,
  });
  if (onOutput) {
    for (const stream of [child.stdout, child.stderr].filter(Boolean)) {
      let rest = '';
      stream.setEncoding('utf8');
      stream.on('data', (data) => {
        const lines = (rest + data).split('\n');
        rest = lines.pop();
        lines.forEach((line) => onOutput(line));
      });
    }
  }
  const url = `http://127.0.0.1:${port}/`;
  return new Promise((resolve, reject) => {
    const started = Date.now();
    let exited = false;
    child.on('exit', (code) => {
      exited = true;
      reject(new Error(`Node-RED stopped (exit ${code}) before its editor answered`));
    });
    const poll = () => {
      if (exited) return;
      const request = http.get(`${url}settings`, { headers: { accept: 'application/json' } }, (response) => {
        response.resume();
        // 401: adminAuth is set, and the admin API answers all the same.
        if (response.statusCode === 200 || response.statusCode === 401) resolve({ child, url });
        else retry();
      });
      request.on('error', retry);
      request.setTimeout(2000, () => request.destroy());
    };
    const retry = () => {
      if (Date.now() - started > timeoutMs) {
        child.kill('SIGKILL');
        reject(new Error(`Node-RED did not answer at ${url} within ${timeoutMs / 1000} s`));
      } else setTimeout(poll, 200);
    };
    poll();
  });
}

/** Stops child processes by PID: SIGINT, then SIGKILL for any still there after `graceMs`. */
async function stopProcesses(children, graceMs = 5000) {
  await Promise.all(
    children
      .filter((child) => child && child.exitCode === null && child.signalCode === null)
      .map(
        (child) =>
          new Promise((resolve) => {
            const timer = setTimeout(() => {
              child.kill('SIGKILL');
            }, graceMs);
            child.once('exit', () => {
              clearTimeout(timer);
              resolve();
            });
            child.kill('SIGINT');
          }),
      ),
  );
}

/** A port on 127.0.0.1 that nothing listens on now (the OS picks it), for a server started next. */
function freePort() {
  const net = require('node:net');
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

function portFree(port) {
  const net = require('node:net');
  return new Promise((resolve) => {
    const probe = net.createServer();
    probe.once('error', () => resolve(false));
    probe.listen(port, '127.0.0.1', () => probe.close(() => resolve(true)));
  });
}

/**
 * Which services the examples talk to: the environment's, or the sandbox's for any that is not set.
 * `generation2` is example 10's server B (see the header): a sandbox of its own, or GRAPH_GEN_URL_2 / GRAPH_GEN_URL.
 */
function servicesFromEnvironment(env = process.env) {
  if (env.GRAPH_GEN_URL_2 && !env.GRAPH_GEN_URL) {
    throw new Error(
      'GRAPH_GEN_URL_2 is set without GRAPH_GEN_URL: set both (server B uses GRAPH_GEN_API_KEY too), ' +
        'or neither to run example 10 against two sandboxes',
    );
  }
  return {
    generation: env.GRAPH_GEN_URL
      ? {
          url: env.GRAPH_GEN_URL,
          apiKey: env.GRAPH_GEN_API_KEY || undefined,
          partnerKey: env.GRAPH_GEN_PARTNER_KEY || undefined,
          sandbox: false,
        }
      : { sandbox: true, apiKey: `sandbox-${crypto.randomBytes(8).toString('hex')}` },
    generation2: env.GRAPH_GEN_URL
      ? {
          url: env.GRAPH_GEN_URL_2 || env.GRAPH_GEN_URL,
          apiKey: env.GRAPH_GEN_API_KEY || undefined,
          sandbox: false,
        }
      : { sandbox: true },
    automation: env.AUTOMATION_URL
      ? { url: env.AUTOMATION_URL, apiKey: env.AUTOMATION_API_KEY || undefined, sandbox: false }
      : { sandbox: true, apiKey: `sandbox-${crypto.randomBytes(8).toString('hex')}` },
  };
}

async function main() {
  const args = process.argv.slice(2);
  const reset = args.includes('--reset');
  const port = Number(process.env.PORT || 1880);
  const userDir = process.env.NODE_RED_USER_DIR || path.join(root, '.node-red-user');
  ensureBuilt();
  // Another Node-RED on the port would answer our readiness check and hide the failure of ours.
  if (!(await portFree(port))) {
    throw new Error(`port ${port} is in use (another Node-RED?): stop it, or run PORT=${port + 1} npm start`);
  }
  const services = servicesFromEnvironment();
  const children = [];
  let stopping = false;
  const stop = async (code) => {
    if (stopping) return;
    stopping = true;
    process.stdout.write('\nstopping Node-RED and the sandboxes...\n');
    await stopProcesses(children);
    process.exit(code);
  };
  process.on('SIGINT', () => stop(0));
  process.on('SIGTERM', () => stop(0));

  try {
    await startEverything({ services, children, port, userDir, reset, isStopping: () => stopping, stop });
  } catch (error) {
    await stopProcesses(children);
    throw error;
  }
}

/**
 * Starts the sandbox processes the services need: one for every service the environment does not name, and a
 * second for example 10's server B (`generation2`) when it is a sandbox too. Gives the services their addresses
 * and resolves with the environment Node-RED reads them from (the examples' ${VAR}s). Each child is pushed to
 * `children` as soon as it runs, so the caller can stop those already up when a later one fails; `onExit(name,
 * code)` hears of one that stops after it started.
 */
async function startServices(services, { children = [], onExit = () => undefined } = {}) {
  const storageUrls = [];
  const startOne = async (name, options) => {
    const sandbox = await startSandboxProcess(options);
    children.push(sandbox.child);
    sandbox.child.on('exit', (code) => onExit(name, code));
    // A sandbox with a generation key has a storage host of its own: Node-RED must trust each.
    if (sandbox.storageUrl) storageUrls.push(sandbox.storageUrl);
    return sandbox;
  };
  if (services.generation.sandbox || services.automation.sandbox) {
    const sandbox = await startOne('the sandbox', {
      generationKey: services.generation.sandbox ? services.generation.apiKey : undefined,
      automationKey: services.automation.sandbox ? services.automation.apiKey : undefined,
    });
    if (services.generation.sandbox) {
      services.generation.url = sandbox.url;
      services.generation.storageUrl = sandbox.storageUrl;
    }
    if (services.automation.sandbox) services.automation.url = sandbox.url;
  }
  const second = services.generation2 ?? { url: services.generation.url, sandbox: false };
  if (second.sandbox) {
    // Server B takes the first's key: every generation config node reads ${GRAPH_GEN_API_KEY}.
    const sandbox = await startOne('the second sandbox', { generationKey: services.generation.apiKey });
    second.url = sandbox.url;
    second.storageUrl = sandbox.storageUrl;
  }
  services.generation2 = second;
  const env = {
    GRAPH_GEN_URL: services.generation.url,
    GRAPH_GEN_URL_2: second.url,
    GRAPH_GEN_API_KEY: services.generation.apiKey || '',
    GRAPH_GEN_PARTNER_KEY: services.generation.partnerKey || '',
    AUTOMATION_URL: services.automation.url,
    AUTOMATION_API_KEY: services.automation.apiKey || '',
    // The sandboxes' storage hosts are on this machine: their downloads' redirects are followed only when trusted.
    ...(storageUrls.length > 0 ? { GRAPH_GEN_TRUSTED_ORIGINS: storageUrls.join(',') } : {}),
  };
  return { services, children, env };
}

async function startEverything({ services, children, port, userDir, reset, isStopping, stop }) {
  const { env } = await startServices(services, {
    children,
    onExit: (name, code) => {
      if (!isStopping()) {
        process.stderr.write(`${name} stopped unexpectedly (exit ${code})\n`);
        stop(1);
      }
    },
  });

  const prepared = prepareUserDir(userDir, { port, services, reset });
  const nodeRed = await startNodeRed({ userDir, port, env });
  children.push(nodeRed.child);
  nodeRed.child.on('exit', (code) => {
    if (!isStopping()) stop(code ?? 0);
  });

  const describe = (service) =>
    service.sandbox
      ? `the sandbox at ${service.url}`
      : `${service.url} (${service.apiKey ? 'with a key' : 'no key'})`;
  process.stdout.write(
    [
      '',
      `  Node-RED editor:     ${nodeRed.url}`,
      `  dashboard page:      ${nodeRed.url}dashboard (example 08, FlowFuse Dashboard 2.0)`,
      `  generation service:  ${describe(services.generation)}`,
      `  pool's server B:     ${describe(services.generation2)} (example 10)`,
      `  automation service:  ${describe(services.automation)}`,
      `  user dir:            ${path.relative(process.cwd(), userDir) || userDir}`,
      prepared.flows === 'kept'
        ? '  flows:               your edited flows (npm start -- --reset deploys the examples again)'
        : `  flows:               ${prepared.count} example tabs deployed`,
      '  Ctrl-C stops Node-RED and the sandboxes.',
      '',
    ].join('\n') + '\n',
  );
}

module.exports = {
  buildFlows,
  buildCredentials,
  encryptCredentials,
  decryptCredentials,
  readExamples,
  prepareUserDir,
  ensureDashboard,
  startSandboxProcess,
  startServices,
  servicesFromEnvironment,
  startNodeRed,
  stopProcesses,
  freePort,
  nodeRedScript,
  solidPng,
};

if (require.main === module) {
  main().catch((error) => {
    process.stderr.write(`npm start: ${error.message}\n`);
    process.exit(1);
  });
}
