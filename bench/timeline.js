'use strict';
// bench/timeline: where a run's late results are, and what the client did then. Reads a directory written by
//
//   BENCH_TIMELINE=<dir> BENCH_CPU_PROF=<dir> BENCH_CLIENT_ARGS="--cpu-prof-interval 250" \
//     node bench/many-jobs.js 10000 --rounds 1
//   node bench/timeline.js <dir> [--window 10] [--windows 30]
//
// and prints, per client run and per window of the sandbox's send times (from the first result on): how many
// results were sent then, their median and longest latency, and, when the client's CPU profile is there, how many
// of its samples fell in that window (a client off the CPU takes fewer than the window over the interval), how many
// were busy, and its two busiest call paths. A profile's times are on the client's monotonic clock: the client
// wrote it beside the machine's clock when it started (clock-<pid>.json).
const fs = require('node:fs');
const path = require('node:path');

const ARGS = process.argv.slice(2);
const DIR = ARGS[0];
const option = (name, fallback) => (ARGS.includes(name) ? Number(ARGS[ARGS.indexOf(name) + 1]) : fallback);
const WINDOW_MS = option('--window', 10);
const WINDOWS = option('--windows', 30);

if (!DIR) {
  console.error('usage: node bench/timeline.js <dir> [--window ms] [--windows n]');
  process.exit(2);
}
const files = fs.readdirSync(DIR);
for (const file of files.filter((name) => /^results-.*\.json$/.test(name)).sort()) {
  const [, side, jobs, pid] = /^results-(.+)-(\d+)-(\d+)\.json$/.exec(file);
  const results = JSON.parse(fs.readFileSync(path.join(DIR, file), 'utf8')).sort((a, b) => a[0] - b[0]);
  if (results.length === 0) continue;
  const samples = profileSamples(pid);
  console.log(`\n${side}, ${jobs} jobs (pid ${pid})${samples ? '' : ': no CPU profile or clock for it'}`);
  const first = results[0][0];
  const windows = new Map();
  for (const [sent, latency] of results) {
    const index = Math.floor((sent - first) / WINDOW_MS);
    if (!windows.has(index)) windows.set(index, []);
    windows.get(index).push(latency);
  }
  for (const [index, latencies] of [...windows].sort((a, b) => a[0] - b[0]).slice(0, WINDOWS)) {
    latencies.sort((a, b) => a - b);
    const from = first + index * WINDOW_MS;
    let line =
      `${String(index * WINDOW_MS).padStart(5)} ms: ${String(latencies.length).padStart(5)} results, ` +
      `p50 ${latencies[latencies.length >> 1].toFixed(2).padStart(6)} ms, ` +
      `max ${latencies[latencies.length - 1].toFixed(1).padStart(5)} ms`;
    if (samples) line += ` | ${activity(samples, from, from + WINDOW_MS)}`;
    console.log(line);
  }
}

/** The client's profile samples as [machine time, call path], or undefined when its profile or clock is missing. */
function profileSamples(pid) {
  const profileFile = files.find((name) => name.endsWith('.cpuprofile') && name.includes(`.${pid}.`));
  const clockFile = `clock-${pid}.json`;
  if (!profileFile || !files.includes(clockFile)) return undefined;
  const profile = JSON.parse(fs.readFileSync(path.join(DIR, profileFile), 'utf8'));
  const clocks = JSON.parse(fs.readFileSync(path.join(DIR, clockFile), 'utf8'));
  const nodes = new Map(profile.nodes.map((node) => [node.id, node]));
  const parents = new Map();
  for (const node of profile.nodes) for (const child of node.children ?? []) parents.set(child, node.id);
  const pathOf = (id) => {
    const names = [];
    for (let at = id; at !== undefined; at = parents.get(at)) {
      const { functionName, url, lineNumber } = nodes.get(at).callFrame;
      names.push(`${functionName || '(anonymous)'}@${url.split('/').pop()}:${lineNumber + 1}`);
    }
    return names.reverse().slice(1, 4).join(' > ');
  };
  const paths = new Map();
  const samples = [];
  let time = profile.startTime;
  profile.samples.forEach((id, index) => {
    time += profile.timeDeltas[index];
    const idle = nodes.get(id).callFrame.functionName === '(idle)';
    if (!idle && !paths.has(id)) paths.set(id, pathOf(id));
    samples.push([clocks.wallMs + (time - clocks.monotonicUs) / 1000, idle ? undefined : paths.get(id)]);
  });
  return samples;
}

function activity(samples, from, to) {
  let count = 0;
  const busy = new Map();
  for (const [time, callPath] of samples) {
    if (time < from || time >= to) continue;
    count += 1;
    if (callPath !== undefined) busy.set(callPath, (busy.get(callPath) ?? 0) + 1);
  }
  const busyCount = [...busy.values()].reduce((sum, n) => sum + n, 0);
  const top = [...busy]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 2)
    .map(([callPath, n]) => `${n} ${callPath.slice(0, 80)}`)
    .join('; ');
  return `${count} samples, ${busyCount} busy${top ? `: ${top}` : ''}`;
}
