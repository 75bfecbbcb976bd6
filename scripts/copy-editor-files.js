'use strict';
// Node-RED finds a node's editor HTML, icons/ and locales/ relative to its .js file, so the build puts
// everything under nodes/ beside the compiled dist/nodes/<type>.js.
const fs = require('node:fs');
const path = require('node:path');

const source = path.join(__dirname, '..', 'nodes');
const target = path.join(__dirname, '..', 'dist', 'nodes');
fs.mkdirSync(target, { recursive: true });
if (fs.existsSync(source)) fs.cpSync(source, target, { recursive: true });
