'use strict';
// The job book's sweeps (src/generation/jobs/job-book.ts, check-timers.ts) over a queue that cannot be read: each
// sweep asks a few jobs alone, and the next asks the others first, so every waiting job is asked in turn however
// many wait. A book on a fake server: what it asks is recorded, the queue read always fails.
const assert = require('node:assert/strict');
const { JobBook } = require('../../../dist/generation/jobs/job-book');
const { CancelRegistry } = require('../../../dist/generation/jobs/cancels');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function bookOnUnreadableQueue() {
  const asked = [];
  let user;
  const sockets = {
    isOpen: true,
    epoch: 1,
    stats: { framesReceived: 0 },
    register: (registered) => {
      user = registered;
      return () => (user = undefined);
    },
    subscribe: () => undefined,
    unsubscribe: () => undefined,
    reopen: () => undefined,
  };
  const book = new JobBook({
    lookup: {
      queue: async () => ({ kind: 'unreadable', reason: 'failed', message: 'the queue answered 503' }),
      status: async (promptId) => {
        asked.push(promptId);
        return { kind: 'phase', phase: 'pending' };
      },
      ended: () => new Promise(() => undefined),
      runTimeMs: async () => undefined,
    },
    cancels: new CancelRegistry(),
    sockets: () => sockets,
    // Submitted here on the open socket: no first check, only the sweeps ask.
    heardAll: () => true,
  });
  return { book, asked, queueFell: (count) => user.onQueueStatus(count, {}, count + 1) };
}

const quietAwait = () => ({
  wantsProgress: false,
  onChange: () => undefined,
  onProgress: () => undefined,
  onEnd: () => undefined,
});

describe('job book sweeps over a queue that cannot be read', () => {
  it('ask 25 waiting jobs alone each, those not asked yet first, then those asked longest ago', async () => {
    const { book, asked, queueFell } = bookOnUnreadableQueue();
    const ids = Array.from({ length: 30 }, (_, index) => `job-${index}`);
    for (const id of ids) book.attach(id, quietAwait());
    try {
      queueFell(29);
      await sleep(700);
      assert.deepEqual(asked, ids.slice(0, 25), 'the first sweep: the first 25 awaited');
      asked.length = 0;
      // The next sweep comes 2 s after the first (at most one every 2 s).
      queueFell(28);
      await sleep(2300);
      assert.deepEqual(
        asked,
        [...ids.slice(25), ...ids.slice(0, 20)],
        'the second sweep: the 5 not asked yet, then the 20 asked longest ago',
      );
    } finally {
      book.close();
    }
  }).timeout(10000);
});
