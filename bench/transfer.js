'use strict';
// bench/transfer: transfers through the sandbox (cloud flavour: a download is a 302 to the separate storage
// host), by this package's REST client (upload from a file path, downloads in file mode, as the download node
// calls them: one file after another) and, in the same run, by a bare undici client doing the same transfers,
// and by `curl` where it is on PATH. Each Node side runs in its own child process so its peak RSS is its own;
// the sandbox runs in this process. Transfers (`--transfers`, all by default):
//   upload    one file of --size-mib (1024) from a path;
//   download  that file, file mode;
//   files     --files (100) files of --file-mib (1) each, file mode, one after another as a msg that names
//             them all is downloaded.
//
//   node bench/transfer.js [--size-mib 1024] [--files 100] [--file-mib 1] [--transfers upload,download,files]
//                          [--warm-files 100] [--rounds 7] [--host node-red|bare] [--compare <checkout>]
//                          [--no-curl] [--overwrite]   (build first)
//
// The package saves as the download node does by default: overwrite off (the finished file is linked into
// place, refusing one that appeared meanwhile); `--overwrite` measures the setting on (renamed into place).
// Each side saves into a directory of its own, made empty for the round.
//
// curl: one process asks the service for every file's signed address (GET /api/view with the API key, one
// keep-alive connection), a second, fed by the first through a pipe, fetches them all from the storage host
// (one keep-alive connection, no key: curl would send a custom header such as X-API-Key on to the redirect's
// host, which the storage host refuses), each saved under the name the storage host gives. Its time is what
// curl counts for its transfers (the sum of their time_total), as the Node sides count theirs inside a process
// that is already running; its wall time from the spawn to the exit of both (process starts included) is shown
// beside it. Its CPU is both processes' (bash's `times`).
// Downloads only: curl does no upload here. No curl on PATH: that side is left out and the run says so.
//
// --compare <checkout>: one more side, this package's client from another built checkout (its dist/, e.g. a
// copy of an earlier build under bench/results/), in the same run, rounds alternating: before and after a
// change without two runs' noise between them. With the files transfer, also both builds in one process
// taking turns every 10 files (see abChild), which shows a change of a few percent per file.
//
// Targets: time and CPU ratios (ours / bare undici) <= 1.1; our peak RSS at most 64 MiB over the child's start;
// beside curl, time <= 1.1x for the single file and <= 1.5x for the many small ones.
// Times, CPU and full GCs: the median of the rounds for each side (rounds rotate which side goes first;
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
//
// Past 400 lines: a run's sides, rounds, checks and report read best in one place; the curl side, the pass of
// two builds in one process and the Node-RED host are in transfer-curl.js, transfer-ab.js and transfer-host.js.
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { pipeline } = require('node:stream/promises');
const { AB_BLOCK, abChild } = require('./transfer-ab');
const { curlVersion, runCurl } = require('./transfer-curl');
const { startNodeRedHost, viewAddress } = require('./transfer-host');

const MiB = 1 << 20;
// Both sides read the file in the same chunks as the package's client does (1 MiB).
const CHUNK = 1 << 20;
// Each side first moves a small file both ways: a Node process's young heap and pools grow to their working
// size on the first transfers whatever their size (a running Node-RED is past that); the rise after this
// warm-up is what a transfer costs. The rise from the cold start is reported too.
const WARM_UP_MIB = 16;
// Then each Node side downloads --warm-files (100) files of --file-mib into a folder of its own, kept to the
// end: a Node-RED that downloads files has compiled that path (V8's optimising compiler, undici's parser) after
// its first few dozen; before that, a file costs about twice as much (measured: the first 100 files in a fresh
// process 8-11 ms of CPU each, the next 100 4-6 ms). curl has nothing to warm. `--warm-files 0` measures the
// cold process.
const TRANSFERS = ['upload', 'download', 'files'];

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

async function child(spec) {
  const { side, host, baseUrl, apiKey, file, directory, warmFile, transfers, bigRef, fileRefs, overwrite } =
    spec;
  const { warmRefs, warmDirectory } = spec;
  const stopHost = host === 'node-red' ? await startNodeRedHost(directory) : async () => undefined;
  const { request, Agent } = require('undici');
  const warmRef = { filename: 'warm.bin', subfolder: '', type: 'output' };
  const results = {};
  let runUpload;
  let runDownload;
  let close = async () => undefined;
  if (side === 'ours' || side === 'compared') {
    const dist = path.join(spec.checkout, 'dist');
    const { GenerationConnection } = require(path.join(dist, 'generation/connection'));
    const { downloadToDirectory } = require(path.join(dist, 'generation/transfer/downloads'));
    const connection = new GenerationConnection({ baseUrl, apiKey, partnerKeyField: 'api_key_service_org' });
    runUpload = async (source) =>
      connection.dialect.rest.upload({ source, filename: 'upload.bin', type: 'input' });
    runDownload = async (ref, into = directory) =>
      downloadToDirectory(connection.dialect, ref, into, overwrite);
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
    runDownload = async (ref, into = directory) => {
      const view = await request(viewAddress(baseUrl, ref), { dispatcher: agent, headers });
      await view.body.dump();
      const storage = await request(view.headers.location, { dispatcher: agent });
      await pipeline(storage.body, fs.createWriteStream(path.join(into, ref.filename)));
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
  await runDownload(warmRef, warmDirectory);
  for (const ref of warmRefs) await runDownload(ref, warmDirectory);
  const runs = {
    upload: () => runUpload(file),
    download: () => runDownload(bigRef),
    // As the download node does with a msg that names several files: one after another.
    files: async () => {
      for (const ref of fileRefs) await runDownload(ref);
    },
  };
  for (const name of transfers) {
    const startRss = process.memoryUsage.rss();
    const sampler = rssSampler();
    const cpuBefore = process.cpuUsage();
    const started = process.hrtime.bigint();
    const from = performance.now();
    await runs[name]();
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

function runChild(spec) {
  return new Promise((resolve, reject) => {
    // The storage host is on 127.0.0.1: trusted as a user trusts theirs (the address rule refuses it otherwise).
    const env = { ...process.env, GRAPH_GEN_TRUSTED_ORIGINS: spec.storageUrl };
    const proc = spawn(
      process.execPath,
      [__filename, spec.ab ? '--ab-child' : '--child', JSON.stringify(spec)],
      {
        stdio: ['ignore', 'pipe', 'inherit'],
        env,
      },
    );
    let out = '';
    proc.stdout.on('data', (chunk) => (out += chunk));
    proc.on('exit', (code) =>
      code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`${spec.side} exited ${code}`)),
    );
  });
}

/** Checks that a side saved exactly the expected files (no temporary or partial file beside them). */
function checkSaved(side, directory, expected) {
  const names = fs.readdirSync(directory).filter((name) => !name.startsWith('.node-red-'));
  const missing = Object.keys(expected).filter((name) => !names.includes(name));
  const extra = names.filter((name) => !(name in expected));
  if (missing.length || extra.length)
    throw new Error(`${side} left [${extra.join(', ')}] and lacks [${missing.join(', ')}]`);
  for (const [name, size] of Object.entries(expected)) {
    const saved = fs.statSync(path.join(directory, name)).size;
    if (saved !== size) throw new Error(`${side} saved ${saved} bytes of ${name}, expected ${size}`);
  }
}

async function main() {
  const { startSandbox } = require('../dist/sandbox');
  const sizeMiB = Number(argument('size-mib', '1024'));
  const fileCount = Number(argument('files', '100'));
  const fileMiB = Number(argument('file-mib', '1'));
  const warmCount = Number(argument('warm-files', '100'));
  const transfers = argument('transfers', TRANSFERS.join(',')).split(',');
  if (transfers.some((name) => !TRANSFERS.includes(name)))
    throw new Error(`--transfers is a list of ${TRANSFERS.join(', ')}`);
  const rounds = Math.max(5, Number(argument('rounds', '7')));
  const host = argument('host', 'node-red');
  if (host !== 'node-red' && host !== 'bare') throw new Error('--host is node-red or bare');
  const compare = argument('compare') === undefined ? undefined : path.resolve(argument('compare'));
  const curl = process.argv.includes('--no-curl') ? undefined : curlVersion();
  const overwrite = process.argv.includes('--overwrite');
  const size = sizeMiB * MiB;
  const fileSize = Math.round(fileMiB * MiB);
  const apiKey = 'bench-key';
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-transfer-'));
  const file = path.join(work, 'upload.bin');
  const block = require('node:crypto').randomBytes(MiB);
  if (transfers.includes('upload')) {
    const fd = fs.openSync(file, 'w');
    for (let i = 0; i < sizeMiB; i++) fs.writeSync(fd, block);
    fs.closeSync(fd);
  }
  const warmFile = path.join(work, 'warm.bin');
  fs.writeFileSync(warmFile, Buffer.concat(Array.from({ length: WARM_UP_MIB }, () => block)));
  const sandbox = await startSandbox({
    generationApiKey: apiKey,
    generation: { hashUploads: false },
    events: { autoRun: false },
  });
  const bigRef = { filename: 'big.bin', subfolder: '', type: 'output' };
  sandbox.generation.addFile(bigRef, { size });
  sandbox.generation.addFile(
    { filename: 'warm.bin', subfolder: '', type: 'output' },
    { size: WARM_UP_MIB * MiB },
  );
  const fileRefs = Array.from({ length: fileCount }, (_, index) => ({
    filename: `file-${String(index).padStart(4, '0')}.bin`,
    subfolder: '',
    type: 'output',
  }));
  for (const ref of fileRefs) sandbox.generation.addFile(ref, { size: fileSize });
  const warmRefs = Array.from({ length: warmCount }, (_, index) => ({
    filename: `warm-${String(index).padStart(4, '0')}.bin`,
    subfolder: '',
    type: 'output',
  }));
  for (const ref of warmRefs) sandbox.generation.addFile(ref, { size: fileSize });
  /** What each transfer leaves in a side's directory, by name and size. */
  const savedBy = {
    upload: {},
    download: { [bigRef.filename]: size },
    files: Object.fromEntries(fileRefs.map((ref) => [ref.filename, fileSize])),
  };
  const refsOf = { download: [bigRef], files: fileRefs };
  const curlTransfers = curl ? transfers.filter((name) => name !== 'upload') : [];

  const sides = ['baseline', 'ours', ...(compare ? ['compared'] : []), ...(curl ? ['curl'] : [])];
  const runs = Object.fromEntries(sides.map((side) => [side, []]));
  let sideBySide;
  try {
    for (let round = 0; round < rounds; round++) {
      // Each side goes first in turn.
      const order = sides.map((_, index) => sides[(index + round) % sides.length]);
      for (const side of order) {
        const directory = fs.mkdtempSync(path.join(work, `${side}-`));
        let result;
        if (side === 'curl') {
          result = {};
          // A folder per transfer, all removed at the end of the round as the Node sides' are.
          for (const name of curlTransfers) {
            const into = path.join(directory, name);
            fs.mkdirSync(into);
            result[name] = await runCurl(sandbox.url, apiKey, refsOf[name], into, work);
            checkSaved(side, into, savedBy[name]);
          }
        } else {
          const warmDirectory = fs.mkdtempSync(path.join(work, `${side}-warm-`));
          const checkout = side === 'compared' ? compare : path.join(__dirname, '..');
          result = await runChild({
            side,
            host,
            baseUrl: sandbox.url,
            storageUrl: sandbox.generation.storageUrl,
            apiKey,
            file,
            directory,
            warmFile,
            transfers,
            bigRef,
            fileRefs,
            warmRefs,
            warmDirectory,
            overwrite,
            checkout,
          });
          fs.rmSync(warmDirectory, { recursive: true, force: true });
          checkSaved(side, directory, Object.assign({}, ...transfers.map((name) => savedBy[name])));
          if (transfers.includes('upload')) {
            const upload = sandbox.generation.uploads.at(-1);
            if (upload.size !== size)
              throw new Error(`${side} uploaded ${upload.size} bytes, expected ${size}`);
          }
        }
        fs.rmSync(directory, { recursive: true, force: true });
        runs[side].push(result);
      }
    }
    if (compare && transfers.includes('files')) {
      const directory = fs.mkdtempSync(path.join(work, 'ab-'));
      sideBySide = await runChild({
        ab: true,
        side: 'ab',
        host,
        baseUrl: sandbox.url,
        storageUrl: sandbox.generation.storageUrl,
        apiKey,
        directory,
        fileRefs,
        warmRefs,
        overwrite,
        passes: rounds,
        builds: [
          { name: 'ours', checkout: path.join(__dirname, '..') },
          { name: 'compared', checkout: compare },
        ],
      });
      fs.rmSync(directory, { recursive: true, force: true });
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
  const label = {
    upload: `upload ${sizeMiB} MiB`,
    download: `download ${sizeMiB} MiB`,
    files: `download ${fileCount} x ${fileMiB} MiB`,
  };
  const rows = [];
  const memoryRows = [];
  for (const name of transfers) {
    const ours = median('ours', name, 'seconds');
    const base = median('baseline', name, 'seconds');
    const oursCpu = median('ours', name, 'cpuSeconds');
    const baseCpu = median('baseline', name, 'cpuSeconds');
    const compared = compare ? median('compared', name, 'seconds') : undefined;
    // Where curl runs but not this transfer (uploads): a dash.
    const withCurl = curlTransfers.includes(name);
    const curlTime = withCurl ? median('curl', name, 'seconds') : undefined;
    const curlCell = (value) => (withCurl ? value() : '—');
    const megabytes = name === 'files' ? fileCount * fileMiB : sizeMiB;
    rows.push({
      transfer: label[name],
      'ours s': ours.toFixed(3),
      'baseline s': base.toFixed(3),
      ...(compare ? { 'compared s': compared.toFixed(3) } : {}),
      ...(curl
        ? {
            'curl s': curlCell(() => curlTime.toFixed(3)),
            'curl wall s': curlCell(() => median('curl', name, 'wallSeconds').toFixed(3)),
          }
        : {}),
      'time ratio': (ours / base).toFixed(2),
      ...(curl
        ? {
            'ours / curl': curlCell(() => (ours / curlTime).toFixed(2)),
            'baseline / curl': curlCell(() => (base / curlTime).toFixed(2)),
            ...(compare ? { 'compared / curl': curlCell(() => (compared / curlTime).toFixed(2)) } : {}),
          }
        : {}),
      'ours CPU s': oursCpu.toFixed(3),
      'baseline CPU s': baseCpu.toFixed(3),
      ...(compare ? { 'compared CPU s': median('compared', name, 'cpuSeconds').toFixed(3) } : {}),
      ...(curl ? { 'curl CPU s': curlCell(() => median('curl', name, 'cpuSeconds').toFixed(3)) } : {}),
      'CPU ratio': (oursCpu / baseCpu).toFixed(2),
    });
    memoryRows.push({
      transfer: label[name],
      'ours MiB/s': (megabytes / ours).toFixed(0),
      'baseline MiB/s': (megabytes / base).toFixed(0),
      ...(curl ? { 'curl MiB/s': curlCell(() => (megabytes / curlTime).toFixed(0)) } : {}),
      'ours full GCs': median('ours', name, 'fullGcs'),
      'baseline full GCs': median('baseline', name, 'fullGcs'),
      'ours RSS rise MiB': (worst('ours', name, 'riseRss') / MiB).toFixed(1),
      'baseline RSS rise MiB': (worst('baseline', name, 'riseRss') / MiB).toFixed(1),
      'ours rise from cold MiB': (worst('ours', name, 'coldRise') / MiB).toFixed(1),
      'baseline rise from cold MiB': (worst('baseline', name, 'coldRise') / MiB).toFixed(1),
      'ours peak RSS MiB': (worst('ours', name, 'peakRss') / MiB).toFixed(1),
      'baseline peak RSS MiB': (worst('baseline', name, 'peakRss') / MiB).toFixed(1),
    });
  }
  console.log(
    `host: ${host}, ${rounds} rounds per side, ${transfers.map((name) => label[name]).join(', ')}` +
      `, overwrite ${overwrite ? 'on' : 'off'}, Node sides warmed with ${warmCount} files of ${fileMiB} MiB` +
      (compare ? `, compared: ${compare}` : ''),
  );
  console.log(
    curl
      ? `curl side: ${curl}; 'curl s' is what curl counts for its transfers, 'curl wall s' adds its process starts`
      : 'curl side left out: no curl on PATH (or --no-curl)',
  );
  console.table(rows);
  console.table(memoryRows);
  if (sideBySide) {
    const { ours, compared } = sideBySide;
    console.log(
      `files, both builds in one process taking turns every ${AB_BLOCK} files (${rounds} x ${fileCount} files each): ` +
        `per file ${ours.msPerFile.toFixed(2)} ms against ${compared.msPerFile.toFixed(2)} ms compared ` +
        `(x${(ours.msPerFile / compared.msPerFile).toFixed(3)}), CPU ${ours.cpuMsPerFile.toFixed(2)} ms against ` +
        `${compared.cpuMsPerFile.toFixed(2)} ms (x${(ours.cpuMsPerFile / compared.cpuMsPerFile).toFixed(3)})`,
    );
  }
  const curlTarget = { download: 1.1, files: 1.5 };
  const verdicts = rows.map((row, index) => {
    const name = transfers[index];
    return {
      transfer: row.transfer,
      'time ratio <= 1.1': Number(row['time ratio']) <= 1.1 ? 'yes' : 'NO',
      'CPU ratio <= 1.1': Number(row['CPU ratio']) <= 1.1 ? 'yes' : 'NO',
      'RSS rise <= 64 MiB': Number(memoryRows[index]['ours RSS rise MiB']) <= 64 ? 'yes' : 'NO',
      'beside curl': curlTransfers.includes(name)
        ? `${Number(row['ours / curl']) <= curlTarget[name] ? 'yes' : 'NO'} (<= ${curlTarget[name]})`
        : '—',
    };
  });
  console.table(verdicts);
  const resultsDir = path.join(__dirname, 'results');
  fs.mkdirSync(resultsDir, { recursive: true });
  fs.writeFileSync(
    path.join(resultsDir, 'transfer.json'),
    JSON.stringify(
      {
        date: new Date().toISOString(),
        node: process.version,
        curl: curl ?? null,
        host,
        sizeMiB,
        fileCount,
        fileMiB,
        transfers,
        overwrite,
        warmFiles: warmCount,
        compare: compare ?? null,
        rounds,
        rows,
        memoryRows,
        sideBySide: sideBySide ?? null,
        runs,
      },
      null,
      2,
    ),
  );
  if (verdicts.some((verdict) => Object.values(verdict).some((value) => String(value).startsWith('NO')))) {
    process.exitCode = 1;
  }
}

if (process.argv.includes('--ab-child')) {
  abChild(JSON.parse(argument('ab-child'))).catch((error) => {
    console.error(error);
    process.exit(1);
  });
} else if (process.argv.includes('--child')) {
  child(JSON.parse(argument('child'))).catch((error) => {
    console.error(error);
    process.exit(1);
  });
} else {
  main().catch((error) => {
    console.error(error);
    process.exit(1);
  });
}
