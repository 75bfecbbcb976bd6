'use strict';
// The editor picture goes only to editor sessions Node-RED lets in: a real Node-RED with adminAuth set (a
// process, as users run it; the test helper's runtime has no adminAuth), a download node with "Picture" on,
// and two clients of Node-RED's editor socket (/comms): one signed in, which gets the picture, and one that
// is not, which Node-RED turns away and which gets nothing, neither live nor the retained copy later.
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const WebSocket = require('ws');
const start = require('../../scripts/start.js');
const { startSandbox } = require('../../dist/sandbox');
const { encodePng } = require('../real/support/png');
const { until } = require('../support/sockets');
const { pressInject } = require('../support/node-red');

const KEY = 'auth-picture-key-0451';
const PASSWORD = 'editor-password-7788';

/** bcryptjs as the Node-RED under test ships it: adminAuth keeps bcrypt hashes of passwords. */
function bcrypt() {
  return require(require.resolve('bcryptjs', { paths: [path.dirname(start.nodeRedScript())] }));
}

/** A client of Node-RED's editor socket, keeping every message it gets and whether it was closed. */
function editorSocket(url) {
  const socket = new WebSocket(url.replace(/^http/, 'ws') + 'comms');
  const client = { socket, messages: [], closed: false };
  socket.on('message', (text) => {
    const parsed = JSON.parse(String(text));
    client.messages.push(...(Array.isArray(parsed) ? parsed : [parsed]));
  });
  socket.on('close', () => (client.closed = true));
  client.opened = new Promise((resolve, reject) => {
    socket.once('open', resolve);
    socket.once('error', reject);
  });
  return client;
}

describe('editor picture with adminAuth: only signed-in editor sessions get it', function () {
  this.timeout(90000);
  let tmp;
  let sandbox;
  let nodeRed;
  let token;

  before(async function () {
    this.timeout(120000);
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'picture-auth-'));
    sandbox = await startSandbox({ generationApiKey: KEY });
    const picture = encodePng(64, 48, (x, y) => [x * 4, y * 5, 128, 255]);
    sandbox.generation.addFile(
      { filename: 'shown.png', subfolder: '', type: 'output' },
      { content: picture },
    );
    const userDir = path.join(tmp, 'user');
    const port = await start.freePort();
    const services = { generation: { url: sandbox.url, apiKey: KEY }, automation: { url: sandbox.url } };
    start.prepareUserDir(userDir, { port, services, flows: 'none' });
    // The settings npm start writes, with adminAuth on top: one user, who may do everything.
    fs.renameSync(path.join(userDir, 'settings.js'), path.join(userDir, 'base-settings.js'));
    const hash = bcrypt().hashSync(PASSWORD, 8);
    fs.writeFileSync(
      path.join(userDir, 'settings.js'),
      `module.exports = { ...require('./base-settings.js'), adminAuth: { type: 'credentials', users: [{ username: 'admin', password: ${JSON.stringify(hash)}, permissions: '*' }] } };\n`,
    );
    nodeRed = await start.startNodeRed({
      userDir,
      port,
      // The sandbox's storage host is on 127.0.0.1: Node-RED, in its own process, follows a redirect there
      // only when trusted.
      env: { GRAPH_GEN_TRUSTED_ORIGINS: sandbox.generation.storageUrl },
      stdio: ['ignore', 'ignore', 'ignore'],
    });
    const answer = await fetch(`${nodeRed.url}auth/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        client_id: 'node-red-editor',
        grant_type: 'password',
        scope: '*',
        username: 'admin',
        password: PASSWORD,
      }),
    });
    assert.equal(answer.status, 200);
    token = (await answer.json()).access_token;
    const deployed = await fetch(`${nodeRed.url}flows`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify([
        { id: 't1', type: 'tab', label: 'pictures' },
        { id: 'cfg', type: 'graph-gen-config', baseUrl: sandbox.url, credentials: { apiKey: KEY } },
        {
          id: 'go',
          type: 'inject',
          z: 't1',
          props: [{ p: 'payload' }],
          payload: JSON.stringify({ filename: 'shown.png', subfolder: '', type: 'output' }),
          payloadType: 'json',
          x: 100,
          y: 100,
          wires: [['dl']],
        },
        {
          id: 'dl',
          type: 'graph-gen-download',
          z: 't1',
          server: 'cfg',
          picture: true,
          x: 300,
          y: 100,
          wires: [[]],
        },
      ]),
    });
    assert.equal(deployed.status, 204, await deployed.text());
  });

  after(async () => {
    if (nodeRed) await start.stopProcesses([nodeRed.child]);
    await sandbox?.close();
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  });

  it('a signed-in session gets the picture; one without a token is turned away and gets nothing, then or later', async () => {
    const signedIn = editorSocket(nodeRed.url);
    const anonymous = editorSocket(nodeRed.url);
    await Promise.all([signedIn.opened, anonymous.opened]);
    signedIn.socket.send(JSON.stringify({ auth: token }));
    await until(() => signedIn.messages.some((m) => m.auth === 'ok'), 'the signed-in session to be let in');
    signedIn.socket.send(JSON.stringify({ subscribe: 'graph-gen/picture/#' }));
    // What the editor sends first; without a token Node-RED answers "auth fail" and closes the socket.
    anonymous.socket.send(JSON.stringify({ subscribe: 'graph-gen/picture/#' }));
    await until(() => anonymous.closed, 'Node-RED to close the socket without a token');

    const injected = await pressInject(
      async () =>
        (
          await fetch(`${nodeRed.url}inject/go`, {
            method: 'POST',
            headers: { authorization: `Bearer ${token}` },
          })
        ).status,
    );
    assert.equal(injected, 200);
    await until(
      () => signedIn.messages.some((m) => m.topic === 'graph-gen/picture/dl'),
      'the picture',
      15000,
    );
    const { data } = signedIn.messages.find((m) => m.topic === 'graph-gen/picture/dl');
    assert.deepEqual([data.type, data.width, data.height], ['image/png', 64, 48]);

    // Later, the picture is retained: a new anonymous session still gets nothing of it.
    const later = editorSocket(nodeRed.url);
    await later.opened;
    later.socket.send(JSON.stringify({ subscribe: 'graph-gen/picture/#' }));
    await until(() => later.closed, 'Node-RED to close the later socket without a token');
    for (const client of [anonymous, later]) {
      assert.deepEqual(client.messages, [{ auth: 'fail' }], 'a session without a token got only "auth fail"');
    }
    signedIn.socket.close();
  });
});
