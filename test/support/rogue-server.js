'use strict';
// A server that breaks the generation protocol on purpose: each test sets `handle(req, res)` to answer as
// it likes (redirects, wrong shapes, echoed secrets). 127.0.0.1 only; records every request.
const http = require('node:http');

async function startRogueServer() {
  const seen = [];
  const sockets = new Set();
  const rogue = {
    seen,
    handle: (_req, res) => res.writeHead(404, { 'content-type': 'text/plain' }).end('404: Not Found'),
    url: '',
    close: () =>
      new Promise((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
  const server = http.createServer((req, res) => {
    seen.push({ method: req.method, url: req.url, headers: req.headers });
    rogue.handle(req, res);
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  rogue.url = `http://127.0.0.1:${server.address().port}`;
  return rogue;
}

/** Answers JSON. */
function json(res, status, body, headers = {}) {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
    ...headers,
  });
  res.end(text);
}

module.exports = { startRogueServer, json };
