/**
 * The v2 mode's event streams (`GET /api/v2/jobs/{id}/events`), as the proxy's realtime.py bridges ComfyUI's
 * socket to Server-Sent Events and as measured (peers/comfy-v2/README.md): frames `event: <name>\ndata:
 * <compact JSON>\n\n` with no `id:` or `retry:`; a `status` snapshot on connect (plus the zero `progress` of a
 * running job); live `progress` and `preview` from the engine, each throttled (dropped, not coalesced); at the
 * run's end a final `status` and one `output` per output, then the end. A `: keepalive` comment comes every
 * keepalive period, and then the job is looked at again (a job that ended without a run's end, such as one
 * taken out of the queue or forgotten, ends its stream there). Streams are capped (429 `too_many_streams`);
 * a client that went away keeps its slot until the next write to it, as measured.
 *
 * Listens to the engine in process (GenerationJobs' 'job-event', 'job-preview' and 'ended'), not over its
 * socket, so two streams of one job both hear it live (the proxy's second stream takes the first one's socket).
 */
import type http from 'node:http';
import type { EnginePreview, SandboxJob } from './generation-jobs';
import { isEnded, type V2JobBook, type V2Upstream } from './v2-jobs';
import { PyFloat, pyJson, sendError, type V2Request } from './v2-wire';

export interface V2StreamOptions {
  /** Streams open at once, all clients together (default 8); one more is answered 429. */
  maxStreams: number;
  /** The keepalive comment's period (default 15 000 ms). */
  keepaliveMs: number;
  /** At most one `progress` and one `preview` per this many ms per stream (default 500). */
  throttleMs: number;
}

/** The streams' counters: slots held now (as the cap counts them), the most ever held, opened, refused. */
export interface V2StreamCounts {
  open: number;
  mostOpen: number;
  opened: number;
  refused: number;
}

interface Stream {
  jobId: string;
  res: http.ServerResponse;
  base: string;
  /** The client went away; the slot is given back at the next write, as the proxy notices it only then. */
  gone: boolean;
  /** The slot was given back: nothing more is written. */
  done: boolean;
  lastProgress: number;
  lastPreview: number;
  keepalive?: NodeJS.Timeout;
}

export function sseFrame(event: string, data: unknown): string {
  return `event: ${event}\ndata: ${pyJson(data, true)}\n\n`;
}

const clamp = (value: number) => Math.max(0, Math.min(1, value));
const numberOf = (value: unknown, fallback: number) => (typeof value === 'number' ? value : fallback);

/** An engine `progress` or `progress_state` event as the proxy's `_translate_progress` makes it. */
export function translateProgress(type: string, data: Record<string, unknown>): Record<string, unknown> {
  if (type === 'progress') {
    const value = numberOf(data.value, 0);
    const max = numberOf(data.max, 1) || 1;
    return {
      value: new PyFloat(clamp(value / max)),
      nodes_done: 0,
      nodes_total: 0,
      current_node: data.node === undefined || data.node === null ? null : String(data.node),
      step: Math.trunc(value),
      steps: Math.trunc(max),
    };
  }
  const nodes =
    data.nodes && typeof data.nodes === 'object'
      ? (data.nodes as Record<string, Record<string, unknown>>)
      : {};
  const entries = Object.entries(nodes);
  const total = entries.length;
  const done = entries.filter(([, node]) => node?.state === 'finished').length;
  const running = entries.find(([, node]) => node?.state === 'running');
  const current = running?.[1];
  let fraction = total ? done / total : 0;
  if (current && numberOf(current.max, 0))
    fraction = total ? (done + numberOf(current.value, 0) / numberOf(current.max, 1)) / total : 0;
  return {
    value: new PyFloat(clamp(fraction)),
    nodes_done: done,
    nodes_total: total,
    current_node: running ? running[0] : null,
    step: current && typeof current.value === 'number' ? Math.trunc(current.value) : null,
    steps: current && typeof current.max === 'number' ? Math.trunc(current.max) : null,
  };
}

function statusEvent(status: unknown, queuePosition?: unknown): Record<string, unknown> {
  const event: Record<string, unknown> = { status };
  if (queuePosition !== undefined && queuePosition !== null) event.queue_position = queuePosition;
  return event;
}

export class V2Streams {
  readonly counts: V2StreamCounts = { open: 0, mostOpen: 0, opened: 0, refused: 0 };
  private readonly byJob = new Map<string, Set<Stream>>();
  private staleEnds = 0;

  private readonly onEvent = (job: SandboxJob, type: string, data: Record<string, unknown>) => {
    if (type !== 'progress' && type !== 'progress_state') return;
    for (const stream of this.streamsOf(job.id)) {
      const now = performance.now();
      if (now - stream.lastProgress < this.options.throttleMs) continue;
      stream.lastProgress = now;
      this.write(stream, sseFrame('progress', translateProgress(type, data)));
    }
  };

  private readonly onPreview = (job: SandboxJob, preview: EnginePreview) => {
    for (const stream of this.streamsOf(job.id)) {
      const now = performance.now();
      if (now - stream.lastPreview < this.options.throttleMs) continue;
      stream.lastPreview = now;
      this.write(
        stream,
        sseFrame('preview', {
          node_id: preview.nodeId ?? '',
          content_type: preview.imageType === 'png' ? 'image/png' : 'image/jpeg',
          data_base64: preview.image.toString('base64'),
        }),
      );
    }
  };

  private readonly onEnded = (job: SandboxJob) => {
    for (const stream of this.streamsOf(job.id)) {
      if (this.staleEnds > 0) {
        // As measured once: the terminal event came before history had it, so the last status is `running`.
        this.staleEnds -= 1;
        this.write(stream, sseFrame('status', statusEvent('running')));
        this.finish(stream);
      } else this.end(stream);
    }
  };

  constructor(
    private readonly upstream: V2Upstream,
    private readonly book: V2JobBook,
    readonly options: V2StreamOptions,
  ) {
    upstream.jobs.on('job-event', this.onEvent);
    upstream.jobs.on('job-preview', this.onPreview);
    upstream.jobs.on('ended', this.onEnded);
  }

  private streamsOf(jobId: string): Stream[] {
    return [...(this.byJob.get(jobId) ?? [])];
  }

  /** Answers an event-stream request the route has checked (job known, engine reachable). */
  serve(r: V2Request, jobId: string): void {
    if (this.counts.open >= this.options.maxStreams) {
      this.counts.refused += 1;
      return sendError(
        r.res,
        429,
        'too_many_streams',
        'Maximum concurrent event streams reached; poll GET /jobs/{id} instead.',
        undefined,
        { 'retry-after': '5' },
      );
    }
    r.res.writeHead(200, {
      'content-type': 'text/event-stream',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
    });
    r.res.flushHeaders();
    this.counts.open += 1;
    this.counts.opened += 1;
    this.counts.mostOpen = Math.max(this.counts.mostOpen, this.counts.open);
    const stream: Stream = {
      jobId,
      res: r.res,
      base: r.base,
      gone: false,
      done: false,
      lastProgress: -Infinity,
      lastPreview: -Infinity,
    };
    r.res.on('close', () => {
      if (!stream.done) stream.gone = true;
    });
    const snapshot = this.book.jobJson(jobId, this.book.statusOf(jobId, r.base), r.base);
    this.write(stream, sseFrame('status', statusEvent(snapshot.status, snapshot.queue_position)));
    if (isEnded(String(snapshot.status))) {
      for (const output of snapshot.outputs as unknown[]) this.write(stream, sseFrame('output', output));
      this.finish(stream);
      return;
    }
    if (snapshot.progress) this.write(stream, sseFrame('progress', snapshot.progress));
    if (stream.done) return;
    let streams = this.byJob.get(jobId);
    if (!streams) this.byJob.set(jobId, (streams = new Set()));
    streams.add(stream);
    stream.keepalive = setInterval(() => this.keepalive(stream), this.options.keepaliveMs);
  }

  /** A keepalive, then a fresh look: a stream whose job ended meanwhile (or whose engine is gone) ends. */
  private keepalive(stream: Stream): void {
    if (!this.write(stream, ': keepalive\n\n')) return;
    if (!this.upstream.reachable) return this.finish(stream);
    const status = this.book.statusOf(stream.jobId, stream.base);
    if (status.status !== 'running' && status.status !== 'queued') this.end(stream);
  }

  /** The final status and the outputs, then the end. */
  private end(stream: Stream): void {
    const job = this.book.jobJson(stream.jobId, this.book.statusOf(stream.jobId, stream.base), stream.base);
    this.write(stream, sseFrame('status', statusEvent(job.status, job.queue_position)));
    for (const output of job.outputs as unknown[]) this.write(stream, sseFrame('output', output));
    this.finish(stream);
  }

  /** Writes unless the stream is over; a client that went away is noticed here and its slot given back. */
  private write(stream: Stream, text: string): boolean {
    if (stream.done) return false;
    if (stream.gone || stream.res.destroyed) {
      this.release(stream);
      return false;
    }
    stream.res.write(text);
    return true;
  }

  /** Ends the response (the chunked body's end: no error, no final status of its own) and frees the slot. */
  private finish(stream: Stream): void {
    if (stream.done) return;
    if (!stream.gone) stream.res.end();
    this.release(stream);
  }

  private release(stream: Stream): void {
    if (stream.done) return;
    stream.done = true;
    this.counts.open -= 1;
    clearInterval(stream.keepalive);
    const streams = this.byJob.get(stream.jobId);
    streams?.delete(stream);
    if (streams?.size === 0) this.byJob.delete(stream.jobId);
  }

  /** Fault: ends the open streams (of one job, or all) now, without a final status; how many. */
  closeStreams(jobId?: string): number {
    const streams =
      jobId === undefined ? [...this.byJob.values()].flatMap((set) => [...set]) : this.streamsOf(jobId);
    for (const stream of streams) this.finish(stream);
    return streams.length;
  }

  /** Fault: the next `count` streams that see their job's run end send `status running` instead, then end. */
  endStale(count: number): void {
    this.staleEnds += count;
  }

  clearFaults(): void {
    this.staleEnds = 0;
  }

  /** Streams held now, gone clients included (what the cap counts). */
  get open(): number {
    return this.counts.open;
  }

  close(): void {
    this.closeStreams();
    this.upstream.jobs.off('job-event', this.onEvent);
    this.upstream.jobs.off('job-preview', this.onPreview);
    this.upstream.jobs.off('ended', this.onEnded);
  }
}
