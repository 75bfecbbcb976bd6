'use strict';
// Starts Node-RED with this package installed into a git-ignored user dir. (Filled out by issue 5.)
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const root = path.join(__dirname, '..');
const userDir = path.join(root, '.node-red-user');
fs.mkdirSync(path.join(userDir, 'node_modules', '@graph-gen'), { recursive: true });
const link = path.join(userDir, 'node_modules', '@graph-gen', 'node-red');
if (!fs.existsSync(link)) fs.symlinkSync(root, link, 'dir');
const child = spawn(
  process.execPath,
  [require.resolve('node-red/red.js'), '--userDir', userDir, '--port', process.env.PORT || '1880'],
  {
    stdio: 'inherit',
  },
);
child.on('exit', (code) => process.exit(code ?? 0));
