'use strict';
// The shared helper for timers whose duration a user or a service chose: Node keeps a delay in 32 bits and takes
// a longer one as 1 ms, so such a timer would fire at once.
const assert = require('node:assert/strict');
const { MAX_TIMER_MS, fitsTimer, timerDelay, startTimer, timeLimitSignal } = require('../dist/timers');

describe('timers with a user- or service-given duration', () => {
  it('tells which durations a Node timer keeps as given', () => {
    assert.equal(MAX_TIMER_MS, 2 ** 31 - 1);
    for (const ms of [0, 1, 60_000, MAX_TIMER_MS]) assert.equal(fitsTimer(ms), true, String(ms));
    for (const ms of [-1, MAX_TIMER_MS + 1, 2 ** 31, Infinity, NaN])
      assert.equal(fitsTimer(ms), false, String(ms));
  });

  it('waits as long as a timer can for a longer duration, and not at all for none', () => {
    const table = [
      [60_000, 60_000],
      [2 ** 31, MAX_TIMER_MS],
      [1e15, MAX_TIMER_MS],
      [Infinity, MAX_TIMER_MS],
      [0, 0],
      [-5, 0],
      [NaN, 0],
    ];
    for (const [ms, delay] of table) assert.equal(timerDelay(ms), delay, String(ms));
  });

  it('a signal or a timer of 2^31 ms or more does not fire at once', async () => {
    const signal = timeLimitSignal(2 ** 31);
    let fired = false;
    const timer = startTimer(() => (fired = true), 2 ** 32);
    await new Promise((resolve) => setTimeout(resolve, 30));
    clearTimeout(timer);
    assert.equal(signal.aborted, false);
    assert.equal(fired, false);
  });
});
