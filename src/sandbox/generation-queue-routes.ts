/**
 * The generation stand-in's routes of the queue (generation-service.ts mounts them): the queue as the queue node
 * reads it, a pending job deleted or the queue cleared (self-hosted servers forget them silently, the cloud
 * cancels and says which), an interrupt, and the cancel routes of ComfyUI 0.26 and later. No Node-RED inside.
 */
import type { RequestContext } from './server';
import type { SandboxJob } from './generation-jobs';
import { CANONICAL_UUID, listedExtraData, outputNodes, type GenerationRoutes } from './generation-routes';

export function mountQueueRoutes(routes: GenerationRoutes): void {
  const { jobs, options, definitions, route, since, readJson } = routes;

  // ComfyUI 0.26 and later: one call dequeues a pending job or interrupts a running one.
  const cancelOne = (id: string): boolean => {
    const job = jobs.jobs.get(id);
    if (job?.state === 'pending') return jobs.remove(id);
    if (job?.state === 'in_progress') return jobs.interrupt(id) !== undefined;
    return false;
  };
  const methodNotAllowed = (ctx: RequestContext) =>
    ctx.text(405, '405: Method Not Allowed', { 'content-type': 'text/plain; charset=utf-8' });
  route('POST', '/jobs/cancel', async (ctx) => {
    if (!jobs.selfHosted || !since(26)) return methodNotAllowed(ctx);
    const body = (await readJson(ctx).catch(() => undefined)) as { job_ids?: unknown } | undefined;
    const ids = Array.isArray(body?.job_ids) ? body.job_ids : [];
    const invalid = ids.filter((id) => typeof id !== 'string' || !CANONICAL_UUID.test(id));
    if (invalid.length > 0)
      return ctx.json(400, { error: 'job_ids contains invalid id(s)', invalid_ids: invalid });
    ctx.json(200, { cancelled: ids.map((id) => cancelOne(id as string)).some(Boolean) });
  });
  route('POST', '/jobs/([^/]+)/cancel', (ctx) => {
    if (!jobs.selfHosted || !since(26)) return methodNotAllowed(ctx);
    ctx.json(200, { cancelled: cancelOne(decodeURIComponent(ctx.params[0])) });
  });

  const queueElement = (job: SandboxJob) => {
    const extra = listedExtraData(job);
    if (options.queueShape === 'object') {
      return { prompt_id: job.id, number: job.number, client_id: job.clientId, created_at: job.createdAt };
    }
    return [job.number, job.id, job.prompt, extra, outputNodes(job, definitions)];
  };
  route('GET', '/queue', (ctx) =>
    ctx.json(200, {
      queue_running: jobs.running().map(queueElement),
      queue_pending: jobs.pending().map(queueElement),
    }),
  );
  route('POST', '/queue', async (ctx) => {
    let body: { delete?: unknown; clear?: unknown } | undefined;
    try {
      body = (await readJson(ctx)) as typeof body;
    } catch {
      return ctx.json(400, { code: 'bad_request', message: 'The body is not JSON' });
    }
    const ids = Array.isArray(body?.delete) ? body.delete.filter((id) => typeof id === 'string') : [];
    if (body?.clear === true) ids.push(...jobs.pending().map((job) => job.id));
    if (jobs.selfHosted) {
      // Self-hosted servers take pending jobs out of the queue and forget them, with no event; a running
      // job is not touched. They answer with an empty 200.
      for (const id of ids) jobs.remove(id);
      ctx.res.writeHead(200, { 'content-length': 0 }).end();
      return;
    }
    // The cloud stand-in cancels pending and running jobs and says which.
    ctx.json(200, { deleted: ids.filter((id) => jobs.cancel(id)) });
  });
  route('POST', '/interrupt', async (ctx) => {
    let body: { prompt_id?: unknown } | undefined;
    try {
      body = (await readJson(ctx)) as typeof body;
    } catch {
      body = undefined;
    }
    // With {prompt_id} only that job, and only if it is the one running; without, whatever runs.
    jobs.interrupt(typeof body?.prompt_id === 'string' ? body.prompt_id : undefined);
    ctx.res.writeHead(200, { 'content-length': 0 }).end();
  });
}
