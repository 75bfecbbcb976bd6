'use strict';
// Talking to the real Comfy API v2 server directly (not through our nodes): reading a job as the server tells it,
// listing what it ran, and cleaning up after a test; plus the workflows the tests run, all image-only (no model
// weights, CPU only).
const {
  sleep,
  until,
  uniquePrefix,
  uniqueColor,
  quickJob,
  blurJob,
} = require('../../real/support/workflows');
const { v2 } = require('./v2');

/** Every job id a test made; afterEach cancels what is still waiting or running. */
const made = new Set();

/** One request to the proxy, with its token; resolves to {status, body} (body parsed when JSON, else text). */
async function api(route, { method = 'GET', body } = {}) {
  const headers = v2.token ? { authorization: `Bearer ${v2.token}` } : {};
  if (body !== undefined) headers['content-type'] = 'application/json';
  const response = await fetch(`${v2.url}${route}`, {
    method,
    headers,
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

/** GET /api/v2/jobs/{id}: the Job, or undefined when the server does not know it. */
async function jobOf(id) {
  const { status, body } = await api(`/api/v2/jobs/${encodeURIComponent(id)}`);
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

/** The proxy's list of the jobs it submitted (newest first, at most 100). */
async function listJobs(query = '') {
  const { status, body } = await api(`/api/v2/jobs?limit=100${query}`);
  if (status !== 200) throw new Error(`GET /api/v2/jobs answered ${status}: ${JSON.stringify(body)}`);
  return body.jobs;
}

/** Submits as another client (not through our nodes); resolves to the job id. */
async function submitDirect(workflow) {
  const { status, body } = await api('/api/v2/jobs', { method: 'POST', body: { workflow } });
  if (status !== 201 || !body?.id) throw new Error(`submit refused: ${status} ${JSON.stringify(body)}`);
  made.add(body.id);
  return body.id;
}

const UNFINISHED = ['queued', 'running', 'canceling'];

/** Cancels every job the test made that is still waiting or running, and waits until none is. */
async function settle() {
  const ids = [...made];
  made.clear();
  if (ids.length === 0) return;
  await until(
    async () => {
      const open = (await listJobs(`&status=${UNFINISHED.join(',')}`)).filter((job) => ids.includes(job.id));
      for (const job of open) {
        if (job.status !== 'canceling') await api(`/api/v2/jobs/${job.id}/cancel`, { method: 'POST' });
      }
      return open.length === 0;
    },
    'the jobs of the test to end',
    60_000,
    250,
  );
}

/** A unique filename prefix (ComfyUI numbers files per prefix; unique ones keep tests apart). */
function prefix(name) {
  return uniquePrefix('v2real', name);
}

/**
 * EmptyImage -> ImageBlur -> PreviewProbe (the ComfyUI kit's test node: `steps` progress steps, each with a JPEG
 * preview, one every `delay` s) -> SaveImage "9": live progress of every kind the proxy sends.
 */
function previewJob(filenamePrefix, { steps = 6, delay = 0.3 } = {}) {
  return {
    1: { class_type: 'EmptyImage', inputs: { width: 128, height: 128, batch_size: 1, color: uniqueColor() } },
    2: { class_type: 'ImageBlur', inputs: { image: ['1', 0], blur_radius: 15, sigma: 1.0 } },
    3: { class_type: 'PreviewProbe', inputs: { image: ['2', 0], steps, delay } },
    9: { class_type: 'SaveImage', inputs: { filename_prefix: filenamePrefix, images: ['3', 0] } },
  };
}

module.exports = {
  made,
  sleep,
  until,
  api,
  jobOf,
  jobReaches,
  listJobs,
  submitDirect,
  settle,
  prefix,
  quickJob,
  blurJob,
  previewJob,
};
