'use strict';
// A TCP proxy the tests control: listens on 127.0.0.1 (a free port) and pipes every connection to a target.
// It can cut every open connection at once (the listener stays up, so clients reconnect), drop new connections
// for a while, and refuse WebSocket upgrades (403) while passing plain HTTP through, which is how proxies and
// firewalls break sockets in the wild.
const net = require('node:net');

/** Bytes of a request head read, at most, to decide whether it asks for a WebSocket upgrade. */
const MAX_HEAD_BYTES = 64 * 1024;
const UPGRADE = /\r\nupgrade:[ \t]*websocket[ \t]*\r\n/i;
const REFUSAL =
  'HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: 25\r\nConnection: close\r\n\r\n' +
  'WebSocket upgrade refused';

/**
 * Starts a proxy to `target` ({host, port}). Resolves to `{port, url, open, cutAll(), refuseUpgrades(on),
 * blockNew(on), loseAnswerTo(pattern), cutBodyOf(pattern), counters, close()}` where
 * `open` is the number of connections open now (both sides) and `counters` holds `connections` (accepted),
 * `upgrades` (connections that asked for a WebSocket and were passed on), `upgradesRefused`, `dropped`
 * (connections dropped by blockNew), `cuts` (calls of cutAll), `answersLost`, `bodiesCut` and `bytesToTarget`
 * (every byte clients sent on to the target).
 */
async function startTcpProxy(target) {
  const sockets = new Set();
  let refusing = false;
  let blocking = false;
  /** The next request whose text matches this is passed on and its answer lost (loseAnswerTo). */
  let answerToLose;
  /** The next request whose head matches this is passed on without its body, then cut (cutBodyOf). */
  let bodyToCut;
  const counters = {
    connections: 0,
    upgrades: 0,
    upgradesRefused: 0,
    dropped: 0,
    cuts: 0,
    answersLost: 0,
    bodiesCut: 0,
    bytesToTarget: 0,
  };

  function track(socket) {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    // A peer that goes away mid-write is normal here; the pair is torn down on close.
    socket.on('error', () => {});
  }

  function pipeToTarget(client, head) {
    const upstream = net.connect(target.port, target.host);
    track(upstream);
    upstream.setNoDelay(true);
    // A request that loseAnswerTo names is passed on whole; its answer is not: the connection is cut as the
    // server starts answering (the server has acted on it, the client never hears).
    let losing = false;
    let cut = false;
    const watch = (chunk) => {
      const text = chunk.toString('latin1');
      if (!losing && answerToLose && answerToLose.test(text)) {
        answerToLose = undefined;
        losing = true;
        counters.answersLost++;
      }
      // A request cutBodyOf names: its head goes on, its body never does, and the connection is cut.
      const headEnd = text.indexOf('\r\n\r\n');
      if (bodyToCut && headEnd >= 0 && bodyToCut.test(text.slice(0, headEnd))) {
        bodyToCut = undefined;
        cut = true;
        counters.bodiesCut++;
        return chunk.subarray(0, headEnd + 4);
      }
      return chunk;
    };
    const forward = (chunk) => {
      if (cut) return;
      const passed = watch(chunk);
      counters.bytesToTarget += passed.length;
      if (passed.length > 0) upstream.write(passed);
      if (cut) setTimeout(() => (client.destroy(), upstream.destroy()), 100);
    };
    forward(head);
    client.on('data', forward);
    upstream.on('data', (chunk) => {
      if (losing) {
        client.destroy();
        upstream.destroy();
      } else client.write(chunk);
    });
    client.once('close', () => upstream.destroy());
    upstream.once('close', () => client.destroy());
    client.resume();
  }

  const server = net.createServer((client) => {
    counters.connections++;
    if (blocking) {
      counters.dropped++;
      client.on('error', () => {});
      client.destroy();
      return;
    }
    track(client);
    client.setNoDelay(true);
    let head = Buffer.alloc(0);
    const onData = (data) => {
      head = Buffer.concat([head, data]);
      const text = head.toString('latin1');
      const end = text.indexOf('\r\n\r\n');
      if (end === -1 && head.length < MAX_HEAD_BYTES) return;
      client.off('data', onData);
      client.pause();
      const asksUpgrade = UPGRADE.test(text.slice(0, end === -1 ? text.length : end + 2));
      if (asksUpgrade && refusing) {
        counters.upgradesRefused++;
        client.end(REFUSAL, () => client.destroy());
        return;
      }
      if (asksUpgrade) counters.upgrades++;
      pipeToTarget(client, head);
    };
    client.on('data', onData);
  });

  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address();

  return {
    port,
    url: `http://127.0.0.1:${port}`,
    counters,
    /** Connections open now, both sides counted. */
    get open() {
      return sockets.size;
    },
    /** Destroys every open connection on both sides; new connections are still accepted. */
    cutAll() {
      counters.cuts++;
      for (const socket of sockets) socket.destroy();
    },
    /** While on, a connection whose first request asks for a WebSocket upgrade gets a 403 and is closed. */
    refuseUpgrades(on = true) {
      refusing = Boolean(on);
    },
    /** While on, each new connection is destroyed as soon as it is accepted (the network is down). */
    blockNew(on = true) {
      blocking = Boolean(on);
    },
    /**
     * The next request whose text matches `pattern` (e.g. /^POST \/api\/prompt /m) reaches the server, and the
     * connection is cut as its answer starts: a request whose answer was lost.
     */
    loseAnswerTo(pattern) {
      answerToLose = pattern;
    },
    /**
     * The next request whose head matches `pattern` reaches the server without its body, and the connection is
     * cut a moment later: a request the server never acted on, though the client cannot know that.
     */
    cutBodyOf(pattern) {
      bodyToCut = pattern;
    },
    /** Stops listening and destroys every open connection. */
    close() {
      for (const socket of sockets) socket.destroy();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

module.exports = { startTcpProxy };
