'use strict';
// Talking to the real server directly (not through our nodes): submitting as another client, reading a job's
// state, and cleaning up after a test. Plus the workflows the tests run, all image-only (no model weights).
const crypto = require('node:crypto');
const { sleep, until, uniquePrefix, quickJob, blurJob } = require('./workflows');
const { comfy } = require('./comfy');

/** A client id that is not any config node's socket: the server sends this job's events to nobody here. */
const OTHER_CLIENT = `real-tests-other-${crypto.randomUUID()}`;

/** Every prompt id a test made; afterEach removes what is still queued or running. */
const made = new Set();

/** One request to the server; resolves to {status, body} (body parsed when JSON, else text). */
async function api(route, { method = 'GET', body } = {}) {
  const response = await fetch(`${comfy.url}${route}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(15_000),
  });
  const text = await response.text();
  let parsed = text;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    // not JSON: keep the text
  }
  return { status: response.status, body: parsed };
}

/** Submits over REST as another client (no config node's socket hears of it); resolves to the prompt id. */
async function submitDirect(workflow) {
  const { status, body } = await api('/api/prompt', {
    method: 'POST',
    body: { prompt: workflow, client_id: OTHER_CLIENT },
  });
  if (status !== 200 || !body?.prompt_id)
    throw new Error(`submit refused: ${status} ${JSON.stringify(body)}`);
  made.add(body.prompt_id);
  return body.prompt_id;
}

/** GET /api/jobs/{id}: the job, or undefined when the server does not know it. */
async function jobOf(id) {
  const { status, body } = await api(`/api/jobs/${encodeURIComponent(id)}`);
  return status === 200 ? body : undefined;
}

/** Waits until the server says the job's status is one of `statuses`; resolves to the job. */
function jobReaches(id, statuses, ms = 60_000) {
  const wanted = [].concat(statuses);
  return until(
    async () => {
      const job = await jobOf(id);
      return job && wanted.includes(job.status) ? job : undefined;
    },
    `job ${id} to be ${wanted.join(' or ')}`,
    ms,
    100,
  );
}

/** Removes every job the test made that is still pending and interrupts the one still running. */
async function settle() {
  const ids = [...made];
  made.clear();
  if (ids.length === 0) return;
  await api('/api/queue', { method: 'POST', body: { delete: ids } });
  await until(
    async () => {
      const { body } = await api('/api/queue');
      const running = (body?.queue_running ?? []).map((item) => item[1]).filter((id) => ids.includes(id));
      const pending = (body?.queue_pending ?? []).map((item) => item[1]).filter((id) => ids.includes(id));
      if (pending.length > 0) await api('/api/queue', { method: 'POST', body: { delete: pending } });
      for (const id of running) await api('/api/interrupt', { method: 'POST', body: { prompt_id: id } });
      return running.length === 0 && pending.length === 0;
    },
    'the jobs of the test to leave the queue',
    30_000,
    250,
  );
}

/** A unique filename prefix (the server numbers files per prefix; unique ones keep tests apart). */
function prefix(name) {
  return uniquePrefix('real', name);
}

/** The slow graph (support/workflows.js), by the name this suite's tests know it by. */
const longJob = blurJob;

module.exports = {
  OTHER_CLIENT,
  made,
  sleep,
  until,
  api,
  submitDirect,
  jobOf,
  jobReaches,
  settle,
  prefix,
  quickJob,
  longJob,
};
