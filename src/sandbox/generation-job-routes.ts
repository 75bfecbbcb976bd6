/**
 * The generation stand-in's routes of a job (generation-service.ts mounts them): the submit (`POST /prompt`,
 * validated as real servers do, its id checked as ComfyUI 0.25 and later check it), a job's status (the cloud's
 * `/job/{id}/status`), the job itself (`/jobs/{id}`, as the cloud and as self-hosted servers answer it), the list
 * of jobs (self-hosted, ComfyUI 0.8 and later) and the history (`/history` and `/history_v2`), each switchable
 * off to test fallbacks. No Node-RED inside.
 */
import type { RequestContext } from './server';
import type { SandboxJob } from './generation-jobs';
import { CANONICAL_UUID, listedExtraData, outputNodes, type GenerationRoutes } from './generation-routes';
import { validatePrompt } from './node-definitions';

export function mountJobRoutes(routes: GenerationRoutes): void {
  const { server, jobs, options, definitions, route, notFound, statusWord, since, selfHostedWord, readJson } =
    routes;
  const terminal = (job: SandboxJob) =>
    job.state === 'completed' || job.state === 'failed' || job.state === 'cancelled';

  route('POST', '/prompt', async (ctx) => {
    let body: { prompt?: unknown; client_id?: unknown; extra_data?: unknown } | undefined;
    try {
      body = (await readJson(ctx)) as typeof body;
    } catch {
      ctx.json(400, {
        error: { type: 'invalid_prompt', message: 'The body is not JSON', details: '' },
        node_errors: {},
      });
      return;
    }
    if (!body || typeof body !== 'object' || !('prompt' in body)) {
      ctx.json(400, {
        error: { type: 'no_prompt', message: 'No prompt provided', details: '' },
        node_errors: {},
      });
      return;
    }
    // As ComfyUI 0.33: the id is checked before the workflow.
    const asked = (body as { prompt_id?: unknown }).prompt_id;
    let promptId: string | undefined;
    if (asked !== undefined && asked !== null) {
      if (jobs.selfHosted && since(25) && (typeof asked !== 'string' || !CANONICAL_UUID.test(asked))) {
        ctx.json(400, {
          error: {
            type: 'invalid_prompt_id',
            message: 'prompt_id must be a valid UUID',
            details:
              'prompt_id must be a UUID string in canonical lowercase hyphenated form; omit it to let the server generate one',
            extra_info: {},
          },
          node_errors: {},
        });
        return;
      }
      // Older servers take any id, as text.
      promptId = String(asked);
    } else if (asked === null && jobs.selfHosted && !since(25)) promptId = 'None';
    const problem = validatePrompt(body.prompt, definitions, options.serverVersion);
    if (problem) {
      ctx.json(400, problem);
      return;
    }
    const extraData =
      body.extra_data && typeof body.extra_data === 'object'
        ? (body.extra_data as Record<string, unknown>)
        : undefined;
    const clientId = typeof body.client_id === 'string' ? body.client_id : undefined;
    const job = jobs.submit(body.prompt as Record<string, unknown>, clientId, extraData, promptId);
    ctx.json(200, { prompt_id: job.id, number: job.number, node_errors: {} });
  });

  route('GET', '/job/([^/]+)/status', (ctx) => {
    // Self-hosted servers have no status endpoint.
    if (jobs.selfHosted) return server.notFound(ctx);
    const job = jobs.jobs.get(decodeURIComponent(ctx.params[0]));
    if (!job) return notFound(ctx, 'job not found');
    ctx.json(200, { status: statusWord(job) });
  });

  route('GET', '/jobs/([^/]+)', (ctx) => {
    if (options.jobsEndpoint === false) return server.notFound(ctx);
    const job = jobs.jobs.get(decodeURIComponent(ctx.params[0]));
    if (!job) {
      if (jobs.selfHosted) return ctx.json(404, { error: 'Job not found' });
      return notFound(ctx, 'job not found');
    }
    if (!jobs.selfHosted) {
      return ctx.json(200, {
        id: job.id,
        status: statusWord(job),
        ...(terminal(job) ? { outputs: job.outputs } : {}),
        ...(job.error ? { execution_error: job.error } : {}),
      });
    }
    // As self-hosted servers answer: an interrupted job is `failed`, and only its messages say why.
    const ended = terminal(job);
    ctx.json(200, {
      id: job.id,
      status: selfHostedWord(job),
      priority: job.number,
      create_time: job.createdAt,
      outputs_count: ended ? countFiles(job.outputs) : 0,
      ...(job.error ? { execution_error: { prompt_id: job.id, ...job.error } } : {}),
      ...(ended
        ? {
            execution_start_time: job.startedAt ?? null,
            execution_end_time: job.endedAt ?? null,
            outputs: job.outputs,
            execution_status: executionStatus(job),
            workflow: { prompt: job.prompt, extra_data: listedExtraData(job) },
          }
        : {}),
    });
  });

  // As a self-hosted server lists jobs (ComfyUI v0.8.0, measured): every job, or those of the statuses
  // asked for, newest first, without workflows; an interrupted job is `failed`. Cloud services: no list.
  const listStatuses = () => [
    'pending',
    'in_progress',
    'completed',
    'failed',
    ...(since(9) ? ['cancelled'] : []),
  ];
  route('GET', '/jobs', (ctx) => {
    const LIST_STATUSES = listStatuses();
    if (!jobs.selfHosted || options.jobsList === false) return server.notFound(ctx);
    const query = ctx.url.searchParams;
    const asked = query.get('status');
    const wanted = asked
      ? asked
          .split(',')
          .map((word) => word.trim().toLowerCase())
          .filter(Boolean)
      : LIST_STATUSES;
    const invalid = wanted.filter((word) => !LIST_STATUSES.includes(word));
    if (invalid.length > 0) {
      return ctx.json(400, {
        error: `Invalid status value(s): ${invalid.join(', ')}. Valid values: ${LIST_STATUSES.join(', ')}`,
      });
    }
    let limit: number | undefined;
    if (query.has('limit')) {
      limit = Number(query.get('limit'));
      if (!Number.isInteger(limit) || limit <= 0)
        return ctx.json(400, { error: 'limit must be a positive integer' });
    }
    const offset = Math.max(0, Number.parseInt(query.get('offset') ?? '0', 10) || 0);
    const listed = [...jobs.jobs.values()]
      .filter((job) => wanted.includes(selfHostedWord(job)))
      .sort((a, b) => b.number - a.number);
    const page = listed.slice(offset, limit === undefined ? undefined : offset + limit);
    ctx.json(200, {
      jobs: page.map((job) => ({
        id: job.id,
        status: selfHostedWord(job),
        priority: job.number,
        create_time: job.createdAt,
        execution_start_time: job.startedAt ?? null,
        execution_end_time: job.endedAt ?? null,
        outputs_count: terminal(job) ? countFiles(job.outputs) : 0,
        ...(since(33) ? { previewable_outputs_count: 0 } : {}),
      })),
      pagination: {
        offset,
        limit: limit ?? null,
        total: listed.length,
        has_more: offset + page.length < listed.length,
      },
    });
  });

  const history = (enabled: () => boolean) => (ctx: RequestContext) => {
    if (!enabled()) return server.notFound(ctx);
    const job = jobs.jobs.get(decodeURIComponent(ctx.params[0]));
    // Self-hosted servers answer {} for a prompt that is unknown or not finished.
    if (!job || !terminal(job)) return ctx.json(200, {});
    ctx.json(200, {
      [job.id]: {
        prompt: [job.number, job.id, job.prompt, listedExtraData(job), outputNodes(job, definitions)],
        outputs: job.outputs,
        status: executionStatus(job),
      },
    });
  };
  route(
    'GET',
    '/history_v2/([^/]+)',
    history(() => options.historyV2Endpoint !== false),
  );
  route(
    'GET',
    '/history/([^/]+)',
    history(() => options.historyEndpoint !== false),
  );
}

function countFiles(outputs: SandboxJob['outputs']): number {
  let count = 0;
  for (const output of Object.values(outputs))
    for (const list of Object.values(output)) if (Array.isArray(list)) count += list.length;
  return count;
}

/** An ended job's `status` as self-hosted servers keep it in history: `{status_str, completed, messages}`. */
function executionStatus(job: SandboxJob): Record<string, unknown> {
  const at = (data: Record<string, unknown> = {}) => ({
    prompt_id: job.id,
    timestamp: job.createdAt,
    ...data,
  });
  const messages: Array<[string, Record<string, unknown>]> = [['execution_start', at()]];
  if (job.state === 'completed') messages.push(['execution_success', at()]);
  else if (job.state === 'failed') messages.push(['execution_error', at(job.error)]);
  else messages.push(['execution_interrupted', at({ node_id: '', node_type: '', executed: [] })]);
  return {
    status_str: job.state === 'completed' ? 'success' : 'error',
    completed: job.state === 'completed',
    messages,
  };
}
