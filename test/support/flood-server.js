'use strict';
// A WebSocket server in its own process for the socket manager's flood test: on a client's first message
// (the feature_flags every client sends) it sends argv[2] small job frames as fast as it can.
const { WebSocketServer } = require('ws');

const total = Number(process.argv[2]);
const frame = JSON.stringify({ type: 'executing', data: { node: '1', prompt_id: 'flood' } });
const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
server.on('listening', () => process.send(server.address().port));
server.on('connection', (ws) => {
  ws.once('message', () => {
    for (let i = 0; i < total; i++) ws.send(frame);
  });
});
