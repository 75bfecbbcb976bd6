'use strict';
// bench/transfer's curl side (see transfer.js): two curl processes, one asking each file's signed address with
// the API key, one fetching them all from the storage host without it, each on one kept-alive connection.
const { spawn, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { viewAddress } = require('./transfer-host');

/** Whether `curl` runs here, and its version line. */
function curlVersion() {
  const found = spawnSync('curl', ['--version'], { encoding: 'utf8' });
  return found.status === 0 ? found.stdout.split(' ').slice(0, 2).join(' ') : undefined;
}

/** A curl config file's quoted value. */
const quoted = (text) => `"${text.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;

/**
 * curl downloads `refs` into `directory` (see the header): the first process writes, for each file, the
 * storage host's address as a line of the second's config. Resolves with the seconds curl itself counts for
 * its transfers (the sum of each one's time_total, as the Node sides count theirs inside a running process),
 * the wall seconds from the spawn to the exit of both (process starts included) and their CPU seconds.
 */
function runCurl(baseUrl, apiKey, refs, directory, work) {
  const signConfig = path.join(work, 'curl-sign.cfg');
  const signTimes = path.join(work, 'curl-sign.times');
  fs.writeFileSync(
    signConfig,
    [
      'silent',
      'show-error',
      'fail',
      `header = ${quoted(`x-api-key: ${apiKey}`)}`,
      // The address for the second process, then (on stderr, to a file) this request's time.
      `write-out = ${quoted('url = "%{redirect_url}"\\n%{stderr}%{time_total}\\n')}`,
      ...refs.flatMap((ref) => [`url = ${quoted(viewAddress(baseUrl, ref))}`, 'output = "/dev/null"']),
      '',
    ].join('\n'),
  );
  // -J: the name the storage host gives (Content-Disposition), which curl keeps inside --output-dir.
  const script =
    'set -o pipefail; curl -K "$1" 2>"$3" | curl --silent --show-error --fail --remote-name-all ' +
    '--remote-header-name --output-dir "$2" --write-out "%{time_total}\\n" -K -; status=$?; times; exit $status';
  return new Promise((resolve, reject) => {
    const started = process.hrtime.bigint();
    const proc = spawn('bash', ['-c', script, 'curl-side', signConfig, directory, signTimes], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    proc.stdout.on('data', (chunk) => (out += chunk));
    proc.on('exit', (code) => {
      const wallSeconds = Number(process.hrtime.bigint() - started) / 1e9;
      const said = fs.readFileSync(signTimes, 'utf8');
      if (code !== 0) return reject(new Error(`curl exited ${code}: ${said.slice(0, 500)}`));
      const sum = (text) =>
        text
          .split('\n')
          .filter((line) => /^[\d.]+$/.test(line.trim()))
          .reduce((total, line) => total + Number(line), 0);
      resolve({ seconds: sum(said) + sum(out), wallSeconds, cpuSeconds: childrenCpu(out) });
    });
  });
}

/** The children's user + system seconds from bash's `times` (its last line: `0m0.120s 0m0.310s`). */
function childrenCpu(text) {
  const line = text.trim().split('\n').at(-1) ?? '';
  return [...line.matchAll(/(\d+)m([\d.]+)s/g)].reduce(
    (sum, [, minutes, seconds]) => sum + Number(minutes) * 60 + Number(seconds),
    0,
  );
}

module.exports = { curlVersion, runCurl };
