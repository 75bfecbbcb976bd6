'use strict';
// bench/transfer: upload and download of a 1 GiB file through the sandbox (cloud flavour: the download is a
// 302 to the separate storage host), by this package's REST client (upload from a file path, download in
// file mode) and, in the same run, by a bare undici client doing the same transfers. Each side runs in its
// own child process so its peak RSS is its own; the sandbox runs in this process.
//
//   node bench/transfer.js [--size-mib 1024] [--rounds 7] [--host node-red|bare]
//
// Targets: time and CPU ratios (ours / baseline) <= 1.1; our peak RSS at most 64 MiB over the child's start.
// Times, CPU and full GCs: the median of the rounds for each side (rounds alternate which side goes first;
// 7 by default, at least 5: on a shared machine a single round of either side may take twice its usual time);
// RSS: the worst round.
//
// Host: these nodes only ever run inside Node-RED, so by default each child (both sides alike) first starts a
// Node-RED runtime with no flows, as a user's process would hold it (a 27 MB heap), and only then transfers.
// `--host bare` runs each side in a bare Node process instead. Beware what that measures: in a bare process
// whose heap is 8-10 MB (a little code loaded), V8 runs a full mark-compact every 10-20 MiB of transfer
// buffers; bare undici alone (7.7 MB) mostly escapes it, and so does a heap of 13 MB or more. Measured on
// 512 MiB uploads: ours 17-55 full collections against the baseline's 6, and the baseline as many as ours once
// given 1-2 MB of unrelated objects. The CPU ratio then says which side of that edge each heap lies on, not what
// the transfer costs; 'full GCs' in the table shows when a run fell into it (in a Node-RED host, rarely).
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { pipeline } = require('node:stream/promises');

const MiB = 1 << 20;
// Both sides read the file in the same chunks as the package's client does (1 MiB).
const CHUNK = 1 << 20;
// Each side first moves a small file both ways: a Node process's young heap and pools grow to their working
// size on the first transfers whatever their size (a running Node-RED is past that); the rise after this
// warm-up is what a transfer costs. The rise from the cold start is reported too.
const WARM_UP_MIB = 16;

function argument(name, fallback) {
  const index = process.argv.indexOf(`--${name}`);
  return index >= 0 ? process.argv[index + 1] : fallback;
}

/** Samples RSS every 20 ms; `peak()` is the highest seen (and the kernel's own maximum). */
function rssSampler() {
  let peak = process.memoryUsage.rss();
  const timer = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage.rss());
  }, 20);
  return {
    peak() {
      clearInterval(timer);
      return Math.max(peak, process.memoryUsage.rss());
    },
  };
}

/** A Node-RED runtime with no flows and no editor traffic: the process these nodes run in. */
async function startNodeRedHost(directory) {
  const RED = require('node-red');
  const userDir = fs.mkdtempSync(path.join(directory, '.node-red-'));
  RED.init(require('node:http').createServer(), {
    userDir,
    flowFile: 'flows.json',
    logging: { console: { level: 'off' } },
    telemetry: { enabled: false },
  });
  await RED.start();
  return async () => {
    await RED.stop();
    fs.rmSync(userDir, { recursive: true, force: true });
  };
}

async function child(side, host, baseUrl, apiKey, file, directory, warmFile) {
  const stopHost = host === 'node-red' ? await startNodeRedHost(directory) : async () => undefined;
  const { request, Agent } = require('undici');
  const bigRef = { filename: 'big.bin', subfolder: '', type: 'output' };
  const warmRef = { filename: 'warm.bin', subfolder: '', type: 'output' };
  const results = {};
  let runUpload;
  let runDownload;
  let close = async () => undefined;
  if (side === 'ours') {
    const { GenerationConnection } = require('../dist/generation/connection');
    const { downloadToDirectory } = require('../dist/generation/transfer/downloads');
    const connection = new GenerationConnection({ baseUrl, apiKey, partnerKeyField: 'api_key_service_org' });
    runUpload = async (source) =>
      connection.dialect.rest.upload({ source, filename: 'upload.bin', type: 'input' });
    runDownload = async (ref) => downloadToDirectory(connection.dialect, ref, directory, true);
    close = () => connection.close();
  } else {
    const agent = new Agent({ keepAliveTimeout: 30_000 });
    const headers = { 'x-api-key': apiKey };
    runUpload = async (source) => {
      const boundary = `----bench${Date.now()}`;
      const head = Buffer.from(
        `--${boundary}\r\nContent-Disposition: form-data; name="image"; filename="upload.bin"\r\n` +
          `Content-Type: application/octet-stream\r\n\r\n`,
      );
      const tail = Buffer.from(
        `\r\n--${boundary}\r\nContent-Disposition: form-data; name="type"\r\n\r\ninput\r\n` +
          `--${boundary}\r\nContent-Disposition: form-data; name="overwrite"\r\n\r\ntrue\r\n--${boundary}--\r\n`,
      );
      const size = fs.statSync(source).size;
      async function* body() {
        yield head;
        for await (const chunk of fs.createReadStream(source, { highWaterMark: CHUNK })) yield chunk;
        yield tail;
      }
      const response = await request(`${baseUrl}/api/upload/image`, {
        method: 'POST',
        dispatcher: agent,
        headers: {
          ...headers,
          'content-type': `multipart/form-data; boundary=${boundary}`,
          'content-length': String(head.length + size + tail.length),
        },
        body: require('node:stream').Readable.from(body()),
      });
      return response.body.json();
    };
    runDownload = async (ref) => {
      const view = await request(`${baseUrl}/api/view?filename=${ref.filename}&subfolder=&type=${ref.type}`, {
        dispatcher: agent,
        headers,
      });
      await view.body.dump();
      const storage = await request(view.headers.location, { dispatcher: agent });
      await pipeline(storage.body, fs.createWriteStream(path.join(directory, ref.filename)));
    };
    close = () => agent.close();
  }
  // Full (mark-compact) collections, to tell a run that fell into the regime described at the top.
  const { PerformanceObserver, performance, constants } = require('node:perf_hooks');
  const fullCollections = [];
  const gcObserver = new PerformanceObserver((list) => {
    for (const entry of list.getEntries())
      if (entry.detail?.kind === constants.NODE_PERFORMANCE_GC_MAJOR) fullCollections.push(entry.startTime);
  });
  gcObserver.observe({ entryTypes: ['gc'] });
  const coldRss = process.memoryUsage.rss();
  await runUpload(warmFile);
  await runDownload(warmRef);
  for (const [name, run] of [
    ['upload', () => runUpload(file)],
    ['download', () => runDownload(bigRef)],
  ]) {
    const startRss = process.memoryUsage.rss();
    const sampler = rssSampler();
    const cpuBefore = process.cpuUsage();
    const started = process.hrtime.bigint();
    const from = performance.now();
    await run();
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    const cpu = process.cpuUsage(cpuBefore);
    const cpuSeconds = (cpu.user + cpu.system) / 1e6;
    const to = performance.now();
    const peak = sampler.peak();
    // The observer hears of collections a little later.
    await new Promise((resolve) => setTimeout(resolve, 50));
    results[name] = {
      seconds,
      cpuSeconds,
      fullGcs: fullCollections.filter((at) => at >= from && at <= to).length,
      startRss,
      peakRss: peak,
      riseRss: peak - startRss,
      coldRise: peak - coldRss,
    };
  }
  gcObserver.disconnect();
  await close();
  await stopHost();
  process.stdout.write(JSON.stringify(results));
}

function runChild(side, host, baseUrl, apiKey, file, directory, warmFile) {
  return new Promise((resolve, reject) => {
    const proc = spawn(
      process.execPath,
      [
        __filename,
        '--child',
        side,
        '--host',
        host,
        '--url',
        baseUrl,
        '--key',
        apiKey,
        '--file',
        file,
        '--dir',
        directory,
        '--warm',
        warmFile,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let out = '';
    proc.stdout.on('data', (chunk) => (out += chunk));
    proc.on('exit', (code) =>
      code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`${side} exited ${code}`)),
    );
  });
}

async function main() {
  const { startSandbox } = require('../dist/sandbox');
  const sizeMiB = Number(argument('size-mib', '1024'));
  const rounds = Math.max(5, Number(argument('rounds', '7')));
  const host = argument('host', 'node-red');
  if (host !== 'node-red' && host !== 'bare') throw new Error('--host is node-red or bare');
  const size = sizeMiB * MiB;
  const apiKey = 'bench-key';
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-transfer-'));
  const file = path.join(work, 'upload.bin');
  const block = require('node:crypto').randomBytes(MiB);
  const fd = fs.openSync(file, 'w');
  for (let i = 0; i < sizeMiB; i++) fs.writeSync(fd, block);
  fs.closeSync(fd);
  const warmFile = path.join(work, 'warm.bin');
  fs.writeFileSync(warmFile, Buffer.concat(Array.from({ length: WARM_UP_MIB }, () => block)));
  const sandbox = await startSandbox({
    generationApiKey: apiKey,
    generation: { hashUploads: false },
    events: { autoRun: false },
  });
  sandbox.generation.addFile({ filename: 'big.bin', subfolder: '', type: 'output' }, { size });
  sandbox.generation.addFile(
    { filename: 'warm.bin', subfolder: '', type: 'output' },
    { size: WARM_UP_MIB * MiB },
  );

  const runs = { ours: [], baseline: [] };
  try {
    for (let round = 0; round < rounds; round++) {
      for (const side of round % 2 === 0 ? ['baseline', 'ours'] : ['ours', 'baseline']) {
        const directory = fs.mkdtempSync(path.join(work, `${side}-`));
        const result = await runChild(side, host, sandbox.url, apiKey, file, directory, warmFile);
        const saved = fs.statSync(path.join(directory, 'big.bin')).size;
        if (saved !== size) throw new Error(`${side} saved ${saved} bytes, expected ${size}`);
        const upload = sandbox.generation.uploads.at(-1);
        if (upload.size !== size) throw new Error(`${side} uploaded ${upload.size} bytes, expected ${size}`);
        fs.rmSync(directory, { recursive: true, force: true });
        runs[side].push(result);
      }
    }
    if (sandbox.generation.storageLeaks().length > 0) throw new Error('the storage host saw the API key');
  } finally {
    await sandbox.close();
    fs.rmSync(work, { recursive: true, force: true });
  }

  const median = (side, name, field) => {
    const values = runs[side].map((run) => run[name][field]).sort((a, b) => a - b);
    const middle = Math.floor(values.length / 2);
    return values.length % 2 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
  };
  const worst = (side, name, field) => Math.max(...runs[side].map((run) => run[name][field]));
  const rows = [];
  for (const name of ['upload', 'download']) {
    const ours = median('ours', name, 'seconds');
    const base = median('baseline', name, 'seconds');
    const oursCpu = median('ours', name, 'cpuSeconds');
    const baseCpu = median('baseline', name, 'cpuSeconds');
    rows.push({
      transfer: `${name} ${sizeMiB} MiB`,
      'ours s': ours.toFixed(2),
      'baseline s': base.toFixed(2),
      'time ratio': (ours / base).toFixed(2),
      'ours CPU s': oursCpu.toFixed(2),
      'baseline CPU s': baseCpu.toFixed(2),
      'CPU ratio': (oursCpu / baseCpu).toFixed(2),
      'ours full GCs': median('ours', name, 'fullGcs'),
      'baseline full GCs': median('baseline', name, 'fullGcs'),
      'ours MiB/s': (sizeMiB / ours).toFixed(0),
      'baseline MiB/s': (sizeMiB / base).toFixed(0),
      'ours RSS rise MiB': (worst('ours', name, 'riseRss') / MiB).toFixed(1),
      'baseline RSS rise MiB': (worst('baseline', name, 'riseRss') / MiB).toFixed(1),
      'ours rise from cold MiB': (worst('ours', name, 'coldRise') / MiB).toFixed(1),
      'baseline rise from cold MiB': (worst('baseline', name, 'coldRise') / MiB).toFixed(1),
      'ours peak RSS MiB': (worst('ours', name, 'peakRss') / MiB).toFixed(1),
      'baseline peak RSS MiB': (worst('baseline', name, 'peakRss') / MiB).toFixed(1),
    });
  }
  console.log(`host: ${host}, ${rounds} rounds per side, ${sizeMiB} MiB`);
  console.table(rows);
  const verdicts = rows.map((row) => ({
    transfer: row.transfer,
    'time ratio <= 1.1': Number(row['time ratio']) <= 1.1 ? 'yes' : 'NO',
    'CPU ratio <= 1.1': Number(row['CPU ratio']) <= 1.1 ? 'yes' : 'NO',
    'RSS rise <= 64 MiB': Number(row['ours RSS rise MiB']) <= 64 ? 'yes' : 'NO',
  }));
  console.table(verdicts);
  const resultsDir = path.join(__dirname, 'results');
  fs.mkdirSync(resultsDir, { recursive: true });
  fs.writeFileSync(
    path.join(resultsDir, 'transfer.json'),
    JSON.stringify(
      { date: new Date().toISOString(), node: process.version, host, sizeMiB, rounds, rows, runs },
      null,
      2,
    ),
  );
  if (verdicts.some((verdict) => Object.values(verdict).includes('NO'))) {
    process.exitCode = 1;
  }
}

if (process.argv.includes('--child')) {
  child(
    argument('child'),
    argument('host'),
    argument('url'),
    argument('key'),
    argument('file'),
    argument('dir'),
    argument('warm'),
  ).catch((error) => {
    console.error(error);
    process.exit(1);
  });
} else {
  main().catch((error) => {
    console.error(error);
    process.exit(1);
  });
}
