'use strict';
// bench/transfer's side-by-side pass (see transfer.js, --compare): two builds of the package in one process.
const fs = require('node:fs');
const path = require('node:path');
const { startNodeRedHost } = require('./transfer-host');

/**
 * --compare, files: both builds in one process, taking turns every AB_BLOCK files (which goes first
 * alternating), each into a folder of its own, the time and CPU of each build's blocks summed. A change of a
 * few percent per file is lost between separate processes on a shared machine (a round of either side may
 * take twice its usual time); here both see the same moments.
 */
const AB_BLOCK = 10;

async function abChild(spec) {
  const { host, baseUrl, apiKey, fileRefs, warmRefs, overwrite, builds, passes } = spec;
  const stopHost = host === 'node-red' ? await startNodeRedHost(spec.directory) : async () => undefined;
  const sides = builds.map(({ name, checkout }) => {
    const dist = path.join(checkout, 'dist');
    const { GenerationConnection } = require(path.join(dist, 'generation/connection'));
    const { downloadToDirectory } = require(path.join(dist, 'generation/transfer/downloads'));
    const connection = new GenerationConnection({ baseUrl, apiKey, partnerKeyField: 'api_key_service_org' });
    const directory = path.join(spec.directory, name);
    return {
      name,
      connection,
      directory,
      download: (ref, into) => downloadToDirectory(connection.dialect, ref, into, overwrite),
      seconds: 0,
      cpuSeconds: 0,
      files: 0,
    };
  });
  for (const side of sides) {
    const warm = path.join(spec.directory, `${side.name}-warm`);
    fs.mkdirSync(warm);
    for (const ref of warmRefs) await side.download(ref, warm);
  }
  let turn = 0;
  for (let pass = 0; pass < passes; pass++) {
    for (const side of sides) fs.mkdirSync(side.directory);
    for (let start = 0; start < fileRefs.length; start += AB_BLOCK) {
      const block = fileRefs.slice(start, start + AB_BLOCK);
      for (const side of turn++ % 2 ? [...sides].reverse() : sides) {
        const cpuBefore = process.cpuUsage();
        const started = process.hrtime.bigint();
        for (const ref of block) await side.download(ref, side.directory);
        side.seconds += Number(process.hrtime.bigint() - started) / 1e9;
        const cpu = process.cpuUsage(cpuBefore);
        side.cpuSeconds += (cpu.user + cpu.system) / 1e6;
        side.files += block.length;
      }
    }
    for (const side of sides) fs.rmSync(side.directory, { recursive: true, force: true });
  }
  for (const side of sides) await side.connection.close();
  await stopHost();
  process.stdout.write(
    JSON.stringify(
      Object.fromEntries(
        sides.map((side) => [
          side.name,
          {
            msPerFile: (side.seconds * 1000) / side.files,
            cpuMsPerFile: (side.cpuSeconds * 1000) / side.files,
          },
        ]),
      ),
    ),
  );
}

module.exports = { AB_BLOCK, abChild };
