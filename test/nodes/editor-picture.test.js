'use strict';
// The picture under a node in the editor: what src/generation/transfer/picture.ts makes of an image file
// (the format matrix a PNG decoder must read, scaling, the bounds), and what the await-job and download
// nodes publish to the editor through Node-RED's comms: only with the setting on, never into a msg or a log.
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const zlib = require('node:zlib');
const helper = require('node-red-node-test-helper');
const {
  imageTypeOf,
  pictureOf,
  PICTURE_BOX,
  MAX_SENT_BYTES,
} = require('../../dist/generation/transfer/picture');
const { encodePng, encodePngRows } = require('../real/support/png');

/** Reads back a PNG this package wrote (8-bit RGB or RGBA, filter 0): size and RGBA pixels. */
function decodeOwnPng(bytes) {
  let offset = 8;
  let header;
  const data = [];
  while (offset < bytes.length) {
    const length = bytes.readUInt32BE(offset);
    const type = bytes.toString('latin1', offset + 4, offset + 8);
    const body = bytes.subarray(offset + 8, offset + 8 + length);
    if (type === 'IHDR')
      header = { width: body.readUInt32BE(0), height: body.readUInt32BE(4), depth: body[8], colour: body[9] };
    if (type === 'IDAT') data.push(body);
    offset += 12 + length;
  }
  assert.equal(header.depth, 8);
  const channels = header.colour === 6 ? 4 : 3;
  const raw = zlib.inflateSync(Buffer.concat(data));
  const pixels = [];
  const stride = 1 + header.width * channels;
  for (let y = 0; y < header.height; y++) {
    assert.equal(raw[y * stride], 0, 'rows are written unfiltered');
    for (let x = 0; x < header.width; x++) {
      const at = y * stride + 1 + x * channels;
      pixels.push([raw[at], raw[at + 1], raw[at + 2], channels === 4 ? raw[at + 3] : 255]);
    }
  }
  return { width: header.width, height: header.height, pixels };
}

/** Noise that deflate cannot shrink: a PNG this large in bytes must be scaled, not sent as it is. */
function noisyPng(width, height, tint) {
  const noise = crypto.randomBytes(width * height * 3);
  return encodePng(width, height, (x, y) => {
    const at = (y * width + x) * 3;
    const n = [noise[at], noise[at + 1], noise[at + 2]];
    return tint ? tint(x, y, n) : [...n, 255];
  });
}

/**
 * The PNG made large in bytes by a private chunk (ignored by decoders) after its header: the scaler runs on
 * it however few pixels it has.
 */
function padded(png) {
  const filler = Buffer.alloc(MAX_SENT_BYTES);
  const type = Buffer.from('zzZz', 'latin1');
  const length = Buffer.alloc(4);
  length.writeUInt32BE(filler.length);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(zlib.crc32(Buffer.concat([type, filler])) >>> 0);
  // Signature (8) and IHDR (25) first; ancillary chunks may go anywhere between it and IEND.
  return Buffer.concat([png.subarray(0, 33), length, type, filler, crc, png.subarray(33)]);
}

describe('editor picture: what an image file becomes', () => {
  // 6 x 3 pixels, every one different, with alpha: the reference each encoding below must decode to.
  const WIDTH = 6;
  const HEIGHT = 3;
  const reference = Array.from({ length: WIDTH * HEIGHT }, (_, i) => [
    i * 13,
    255 - i * 11,
    (i * 37) % 256,
    100 + i * 7,
  ]);

  it('tells PNG, JPEG, GIF and WebP by their first bytes, and nothing else', () => {
    assert.equal(imageTypeOf(encodePng(1, 1, () => [0, 0, 0, 255])), 'image/png');
    assert.equal(imageTypeOf(Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0, 0x10])), 'image/jpeg');
    assert.equal(imageTypeOf(Buffer.from('GIF89a\x01\x00', 'latin1')), 'image/gif');
    assert.equal(imageTypeOf(Buffer.from('RIFF\x10\x00\x00\x00WEBPVP8 ', 'latin1')), 'image/webp');
    assert.equal(imageTypeOf(Buffer.from('<svg xmlns="http://www.w3.org/2000/svg"/>')), undefined);
    assert.equal(imageTypeOf(Buffer.from('\x00\x00\x00\x18ftypmp42', 'latin1')), undefined);
    assert.equal(imageTypeOf(Buffer.alloc(0)), undefined);
  });

  it('sends a small image as it is, a PNG with its size in pixels', async () => {
    const png = encodePng(40, 20, () => [10, 20, 30, 255]);
    const { picture } = await pictureOf(png);
    assert.equal(picture.type, 'image/png');
    assert.ok(picture.bytes.equals(png));
    assert.deepEqual([picture.width, picture.height], [40, 20]);
    const jpeg = Buffer.concat([Buffer.from([0xff, 0xd8, 0xff, 0xe0]), Buffer.alloc(1000)]);
    const sent = await pictureOf(jpeg);
    assert.equal(sent.picture.type, 'image/jpeg');
    assert.ok(sent.picture.bytes.equals(jpeg));
    assert.equal(await pictureOf(Buffer.from('not an image at all')), undefined);
  });

  it('reads every PNG colour type, bit depth and row filter the scaler may meet', async () => {
    const rowsOf = (samplesOf) =>
      Array.from({ length: HEIGHT }, (_, y) =>
        Buffer.from(Array.from({ length: WIDTH }, (__, x) => samplesOf(reference[y * WIDTH + x], x)).flat()),
      );
    const cases = [];
    for (const filter of [0, 1, 2, 3, 4, (y) => y % 5]) {
      cases.push({
        name: `RGBA 8 filter ${filter}`,
        colourType: 6,
        bitDepth: 8,
        filter,
        rows: rowsOf((p) => p),
        expect: (p) => p,
      });
    }
    cases.push(
      {
        name: 'RGBA 16',
        colourType: 6,
        bitDepth: 16,
        filter: 4,
        rows: rowsOf((p) => p.flatMap((v) => [v, 0x5a])),
        expect: (p) => p,
      },
      {
        name: 'RGB 8',
        colourType: 2,
        bitDepth: 8,
        filter: 3,
        rows: rowsOf((p) => p.slice(0, 3)),
        expect: (p) => [...p.slice(0, 3), 255],
      },
      {
        name: 'RGB 16',
        colourType: 2,
        bitDepth: 16,
        filter: 1,
        rows: rowsOf((p) => p.slice(0, 3).flatMap((v) => [v, 1])),
        expect: (p) => [...p.slice(0, 3), 255],
      },
      {
        name: 'grey 8',
        colourType: 0,
        bitDepth: 8,
        filter: 2,
        rows: rowsOf((p) => [p[0]]),
        expect: (p) => [p[0], p[0], p[0], 255],
      },
      {
        name: 'grey + alpha 8',
        colourType: 4,
        bitDepth: 8,
        filter: 4,
        rows: rowsOf((p) => [p[0], p[3]]),
        expect: (p) => [p[0], p[0], p[0], p[3]],
      },
      {
        name: 'grey + alpha 16',
        colourType: 4,
        bitDepth: 16,
        filter: 0,
        rows: rowsOf((p) => [p[0], 9, p[3], 9]),
        expect: (p) => [p[0], p[0], p[0], p[3]],
      },
    );
    // Packed samples: 1, 2 and 4 bits of grey (scaled to 0-255), and palette indexes with tRNS alpha.
    for (const bitDepth of [1, 2, 4]) {
      const max = (1 << bitDepth) - 1;
      const value = (i) => i % (max + 1);
      const pack = (y) => {
        const row = Buffer.alloc(Math.ceil((WIDTH * bitDepth) / 8));
        for (let x = 0; x < WIDTH; x++) {
          const bit = x * bitDepth;
          row[bit >> 3] |= value(y * WIDTH + x) << (8 - bitDepth - (bit & 7));
        }
        return row;
      };
      const rows = Array.from({ length: HEIGHT }, (_, y) => pack(y));
      const grey = (i) => Math.round((value(i) * 255) / max);
      cases.push({
        name: `grey ${bitDepth}`,
        colourType: 0,
        bitDepth,
        filter: 1,
        rows,
        expectAt: (i) => [grey(i), grey(i), grey(i), 255],
      });
      const palette = Buffer.from(
        Array.from({ length: max + 1 }, (_, i) => [(i * 50) % 256, 200 - i * 10, i * 3]).flat(),
      );
      const transparency = Buffer.from([0, 128]);
      const colour = (i) => [
        (value(i) * 50) % 256,
        200 - value(i) * 10,
        value(i) * 3,
        value(i) < 2 ? [0, 128][value(i)] : 255,
      ];
      cases.push({
        name: `palette ${bitDepth}`,
        colourType: 3,
        bitDepth,
        filter: 2,
        rows,
        palette,
        transparency,
        expectAt: colour,
      });
    }
    for (const c of cases) {
      const png = padded(encodePngRows({ width: WIDTH, height: HEIGHT, ...c }));
      assert.ok(png.length > MAX_SENT_BYTES);
      const { picture } = await pictureOf(png);
      assert.ok(picture, `${c.name}: a picture`);
      const decoded = decodeOwnPng(picture.bytes);
      assert.deepEqual([decoded.width, decoded.height], [WIDTH, HEIGHT], c.name);
      const expected = reference.map((p, i) => (c.expectAt ? c.expectAt(i) : c.expect(p)));
      assert.deepEqual(decoded.pixels, expected, c.name);
    }
  });

  it('scales a large PNG down to fit the picture box, each pixel the average of those it covers', async () => {
    // 1000 x 500: the left half red with noise, the right half blue. A picture pixel averages some 39 of them: red
    // (or blue) 192 + 0..63 averages 223.5 with a spread of about 3, so 205..242 holds it (6 spreads each side;
    // 200..230 failed about once in 12 runs).
    const png = noisyPng(1000, 500, (x, y, [a, b, c]) =>
      x < 500 ? [192 + (a >> 2), b >> 5, c >> 5, 255] : [a >> 5, b >> 5, 192 + (c >> 2), 255],
    );
    assert.ok(png.length > MAX_SENT_BYTES, 'the test image is larger than what is sent as it is');
    const { picture } = await pictureOf(png);
    assert.equal(picture.type, 'image/png');
    assert.deepEqual([picture.width, picture.height], [PICTURE_BOX, PICTURE_BOX / 2]);
    assert.ok(picture.bytes.length < 100 * 1024, `a small picture (${picture.bytes.length} bytes)`);
    const decoded = decodeOwnPng(picture.bytes);
    assert.deepEqual([decoded.width, decoded.height], [160, 80]);
    const at = (x, y) => decoded.pixels[y * decoded.width + x];
    for (const [x, y] of [
      [0, 0],
      [40, 40],
      [79, 79],
    ]) {
      const [r, g, b] = at(x, y);
      assert.ok(r >= 205 && r <= 242 && g <= 7 && b <= 7, `left (${x},${y}) is red: ${at(x, y)}`);
    }
    for (const [x, y] of [
      [80, 0],
      [120, 40],
      [159, 79],
    ]) {
      const [r, g, b] = at(x, y);
      assert.ok(r <= 7 && g <= 7 && b >= 205 && b <= 242, `right (${x},${y}) is blue: ${at(x, y)}`);
    }
    // A black and white checkerboard averages to grey.
    const board = padded(
      encodePng(640, 640, (x, y) => ((x + y) % 2 ? [255, 255, 255, 255] : [0, 0, 0, 255])),
    );
    const { picture: grey } = await pictureOf(board);
    assert.deepEqual([grey.width, grey.height], [160, 160]);
    const pixels = decodeOwnPng(grey.bytes).pixels;
    assert.ok(
      pixels.every(([r, g, b, a]) => Math.abs(r - 128) <= 1 && r === g && g === b && a === 255),
      'grey everywhere',
    );
  });

  it('refuses what it cannot show: a large JPEG, a PNG with too many pixels, an interlaced or broken large PNG', async () => {
    const jpeg = Buffer.concat([Buffer.from([0xff, 0xd8, 0xff, 0xe0]), crypto.randomBytes(MAX_SENT_BYTES)]);
    assert.deepEqual(await pictureOf(jpeg), { refused: 'too-large' });
    // A header of 20000 x 20000 pixels (400 million) is refused before any data is inflated, small or not.
    const huge = encodePng(4, 4, () => [1, 2, 3, 255]);
    huge.writeUInt32BE(20000, 16);
    huge.writeUInt32BE(20000, 20);
    assert.deepEqual(await pictureOf(huge), { refused: 'too-large' });
    const big = noisyPng(600, 600);
    const interlaced = Buffer.from(big);
    interlaced[28] = 1;
    assert.deepEqual(await pictureOf(interlaced), { refused: 'unreadable' });
    // Cut inside its image data: the rows end early.
    const cut = big.subarray(0, Math.floor(big.length * 0.6));
    assert.deepEqual(await pictureOf(cut), { refused: 'unreadable' });
    // Its image data replaced by noise that is no deflate stream.
    const broken = Buffer.from(big);
    crypto.randomBytes(2000).copy(broken, 41);
    assert.deepEqual(await pictureOf(broken), { refused: 'unreadable' });
  });

  it('stops scaling when asked (the node closed, or a newer image came)', async () => {
    const controller = new AbortController();
    const working = pictureOf(noisyPng(1500, 1500), controller.signal);
    controller.abort();
    assert.equal(await working, undefined);
  });
});

describe('editor picture: what the await-job and download nodes send to the editor', () => {
  const WebSocket = require('ws');
  const { startSandbox } = require('../../dist/sandbox');
  const configNode = require('../../dist/nodes/graph-gen-config.js');
  const awaitNode = require('../../dist/nodes/graph-gen-await-job.js');
  const downloadNode = require('../../dist/nodes/graph-gen-download.js');
  const { KEY, workflow, sleep, until, awaitFlow, collect, withFastSockets } = require('../support/sockets');
  withFastSockets();
  let sandbox;
  let directory;
  let published;
  const onComms = (event) => {
    if (event.topic.startsWith('graph-gen/picture/')) published.push(event);
  };
  const big = { filename: 'big_00001_.png', subfolder: '', type: 'output' };
  const bigBytes = noisyPng(1200, 900);
  const photo = { filename: 'photo.jpg', subfolder: '', type: 'output' };
  const photoBytes = Buffer.concat([Buffer.from([0xff, 0xd8, 0xff, 0xe0]), crypto.randomBytes(400 * 1024)]);
  const notImage = { filename: 'looks_like.png', subfolder: '', type: 'output' };

  before(async () => {
    await helper.startServer();
    sandbox = await startSandbox({ generationApiKey: KEY, events: { stepDelayMs: 1 } });
    sandbox.generation.addFile(big, { content: bigBytes, contentType: 'image/png' });
    sandbox.generation.addFile(photo, { content: photoBytes, contentType: 'image/jpeg' });
    sandbox.generation.addFile(notImage, { content: crypto.randomBytes(5000), contentType: 'image/png' });
    directory = fs.mkdtempSync(path.join(os.tmpdir(), 'editor-picture-'));
    helper._RED.events.on('comms', onComms);
  });
  after(async () => {
    helper._RED.events.off('comms', onComms);
    await sandbox.close();
    await helper.stopServer();
    fs.rmSync(directory, { recursive: true, force: true });
  });
  beforeEach(() => {
    published = [];
    sandbox.counters.reset();
  });
  afterEach(async () => {
    await helper.unload();
  });

  /** The bytes of every published picture must appear nowhere in Node-RED's log. */
  function assertNotLogged() {
    const logged = JSON.stringify(helper.log().args);
    for (const { data } of published) {
      if (data.data) assert.equal(logged.includes(data.data.slice(0, 64)), false, 'picture bytes in the log');
    }
  }

  async function loadDownload(own) {
    await helper.load(
      [configNode, downloadNode],
      [
        { id: 'cfg', type: 'graph-gen-config', baseUrl: sandbox.url },
        { id: 'dl', type: 'graph-gen-download', server: 'cfg', wires: [['out']], ...own },
        { id: 'out', type: 'helper' },
      ],
      { cfg: { apiKey: KEY } },
    );
    return collect('out');
  }

  it('await-job with "Picture" on: publishes the last output image, retained, to the editor only, and takes it back on close', async () => {
    await helper.load([configNode, awaitNode], awaitFlow(sandbox, { picture: true }), {
      cfg: { apiKey: KEY },
    });
    const done = collect('done');
    const connection = helper.getNode('cfg').connection;
    assert.equal(await connection.sockets().ready(5000), true);
    const job = sandbox.jobs.submit(workflow({}, { save: { sandbox_batches: 2 } }), connection.clientId);
    helper.getNode('await').receive({ prompt_id: job.id });
    const msg = await done.next();
    assert.deepEqual(Object.keys(msg).sort(), ['_msgid', 'payload', 'prompt_id']);
    assert.deepEqual(Object.keys(msg.payload).sort(), ['files', 'outputs', 'prompt_id', 'status']);
    await until(() => published.length === 1, 'the picture to be published');
    const [{ topic, data, retain }] = published;
    assert.equal(topic, 'graph-gen/picture/await');
    assert.equal(retain, true, 'retained: an editor opened later sees it too');
    assert.equal(data.type, 'image/png');
    assert.deepEqual([data.width, data.height], [1, 1], "the sandbox's outputs are 1 x 1 PNGs");
    assert.equal(imageTypeOf(Buffer.from(data.data, 'base64')), 'image/png');
    // The last of the result's two images, fetched once.
    const last = msg.payload.files.at(-1).filename;
    const views = sandbox.counters.requests.filter((seen) => seen.path.endsWith('/view'));
    assert.deepEqual(
      views.map((seen) => seen.query.get('filename')),
      [last],
    );
    assertNotLogged();
    await helper.unload();
    assert.deepEqual(published.at(-1), {
      topic: 'graph-gen/picture/await',
      data: { cleared: true },
      retain: false,
    });
  });

  it('await-job without "Picture" (the default): publishes nothing and fetches nothing', async () => {
    await helper.load([configNode, awaitNode], awaitFlow(sandbox), { cfg: { apiKey: KEY } });
    const done = collect('done');
    const connection = helper.getNode('cfg').connection;
    assert.equal(await connection.sockets().ready(5000), true);
    const job = sandbox.jobs.submit(workflow(), connection.clientId);
    helper.getNode('await').receive({ prompt_id: job.id });
    await done.next();
    await sleep(300);
    await helper.unload();
    assert.deepEqual(published, []);
    assert.equal(sandbox.counters.requests.filter((seen) => seen.path.endsWith('/view')).length, 0);
  });

  it('download (buffer) with "Picture" on: a large PNG goes to the editor scaled, the msg keeps the file as it was', async () => {
    const out = await loadDownload({ picture: true });
    // An editor session: Node-RED's own comms socket, as the editor opens it.
    const editor = new WebSocket(`${helper.url().replace(/^http/, 'ws')}/comms`);
    const received = [];
    editor.on('message', (text) => received.push(...JSON.parse(String(text))));
    await new Promise((resolve) => editor.once('open', resolve));
    editor.send(JSON.stringify({ subscribe: 'graph-gen/picture/#' }));
    try {
      helper.getNode('dl').receive({ payload: big });
      const msg = await out.next();
      assert.ok(msg.payload.equals(bigBytes), 'the msg has the file itself');
      assert.deepEqual(Object.keys(msg).sort(), ['_msgid', 'contentType', 'file', 'filename', 'payload']);
      await until(
        () => received.some((m) => m.topic === 'graph-gen/picture/dl'),
        'the editor to get the picture',
      );
      const { data } = received.find((m) => m.topic === 'graph-gen/picture/dl');
      assert.deepEqual([data.type, data.width, data.height], ['image/png', PICTURE_BOX, 120]);
      const bytes = Buffer.from(data.data, 'base64');
      assert.ok(bytes.length < 100 * 1024, `scaled: ${bytes.length} bytes, not ${bigBytes.length}`);
      assert.deepEqual(decodeOwnPng(bytes).width, PICTURE_BOX);
      assertNotLogged();
    } finally {
      editor.close();
    }
  });

  it('download (buffer): a large JPEG is refused (the editor says so), a file that is no image leaves the picture', async () => {
    const out = await loadDownload({ picture: true });
    helper.getNode('dl').receive({ payload: photo });
    await out.next();
    await until(() => published.length === 1, 'the refusal');
    assert.deepEqual(published[0].data, { refused: 'too-large' });
    helper.getNode('dl').receive({ payload: notImage });
    await out.next();
    await sleep(200);
    assert.equal(published.length, 1, 'nothing published for a file that is not an image');
  });

  it('download (file) with "Picture" on: reads the saved file back and shows it; without the setting, nothing', async () => {
    const out = await loadDownload({
      picture: true,
      mode: 'file',
      directory,
      directoryType: 'str',
      overwrite: true,
    });
    helper.getNode('dl').receive({ payload: big });
    const msg = await out.next();
    assert.equal(msg.payload, path.join(directory, big.filename));
    await until(() => published.length === 1, 'the picture of the saved file');
    assert.deepEqual([published[0].data.width, published[0].data.height], [PICTURE_BOX, 120]);
    await helper.unload();
    published = [];
    const quiet = await loadDownload({ mode: 'file', directory, directoryType: 'str', overwrite: true });
    helper.getNode('dl').receive({ payload: big });
    await quiet.next();
    await sleep(300);
    await helper.unload();
    assert.deepEqual(published, []);
  });
});
