/**
 * The generation service's live events: the /ws WebSocket, each job's event script and binary frames, with
 * the controls tests need (failures of each kind, slow and endless jobs, dropped sockets, raw frames).
 *
 * A job's script follows its workflow: `execution_start`, `execution_cached`, then per node `executing`;
 * nodes with a `steps` input send `progress`, `progress_state` and a preview per step; Save-like nodes
 * send `executed` with file references (stored in jobs.files so downloads work); then `execution_success`
 * and `executing` with node null. Special node classes steer it: `SandboxFail` ({exception_type,
 * message}), `SandboxSlow` ({ms}), `SandboxHang` (runs until cancelled), `SandboxText` ({text}) and
 * `SandboxPreview` ({count, kind: 1 | 4}).
 *
 * Routing as real deployments do (FACTS.md): a self-hosted server sends a job's events only to the
 * socket whose clientId the job named (one socket per clientId: a newer one replaces the older, and the
 * older one's close forgets the newer, Comfy-Org/ComfyUI#16010), and for a job without client_id sends no
 * `execution_start`, `execution_cached` or `execution_success` but broadcasts the rest; the cloud sends every
 * event to every socket of the key. Past 400 lines: a job's whole script, event by event, is one story.
 */
import { randomUUID } from 'node:crypto';
import type { WebSocket } from 'ws';
import { encodePreview, encodePreviewWithMetadata, encodeText } from '../generation/jobs/frames';
import type { SandboxServer } from './server';
import {
  fileKey,
  type EnginePreview,
  type FileRef,
  type GenerationJobs,
  type SandboxJob,
} from './generation-jobs';

export interface GenerationEventsOptions {
  /** Run submitted jobs automatically (default true). */
  autoRun?: boolean;
  /** `client`: a job's events only to its client's socket (self-hosted); `key`: to every socket (cloud). */
  routing?: 'client' | 'key';
  /** Pause between two events of a job (default 2 ms). */
  stepDelayMs?: number;
  /** Jobs executing at once (default: 1 self-hosted, unlimited cloud). */
  concurrency?: number;
  /** At most this many progress steps per sampler node (default 3). */
  maxSteps?: number;
  /** Send a preview per progress step (default true). */
  previews?: boolean;
  /** Send `status` events with the queue count when jobs start and end (default true). */
  statusEvents?: boolean;
  /**
   * Put the moment of sending into each `execution_success` as `sent_at` (ms since the epoch, sub-ms, from
   * `performance.timeOrigin + performance.now()`): benchmarks measure from it to the result.
   */
  stampCompletion?: boolean;
}

export interface GenerationEvents {
  /** Options as they are now; tests may change them between jobs. */
  options: GenerationEventsOptions;
  /** Frames sent so far, to all sockets. */
  readonly framesSent: number;
  /** With `stampCompletion`: prompt id -> the `sent_at` of its execution_success (for benchmarks whose
   * client cannot see the frame, such as a flow in Node-RED). */
  readonly completionsSent: Map<string, number>;
  /** Connected sockets. */
  readonly sockets: number;
  /** Sends a text event to every socket (e.g. `status`, `notification`). */
  broadcast(type: string, data: Record<string, unknown>): void;
  /** Sends a frame as is: text (string) or binary (Buffer), to every socket or one client's. */
  sendRaw(frame: string | Buffer, clientId?: string): void;
  /** Closes every socket abruptly now. */
  dropSockets(): void;
  /** Closes every socket abruptly right after `frames` more frames have been sent. */
  dropAfterFrames(frames: number): void;
  /** Starts a job that was submitted while autoRun was off. */
  run(jobId: string): void;
  /** Every job held by a `SandboxHang` node goes on to its end now; how many there were. */
  releaseHangs(): number;
  /**
   * As a self-hosted server's restart: every job stops without an event and is forgotten (queue and history
   * live in memory), and every socket drops.
   */
  restart(): void;
  close(): void;
}

const TINY_PNG = Buffer.from(
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==',
  'base64',
);
const TINY_JPEG = Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0, 16, 0x4a, 0x46, 0x49, 0x46, 0, 1, 0xff, 0xd9]);

const SAVE_CLASS = /^(Save|Preview)/;
/** Events a self-hosted server sends only to the job's own client (never broadcast). */
const CLIENT_ONLY = new Set(['execution_start', 'execution_cached', 'execution_success']);

interface Peer {
  ws: WebSocket;
  clientId: string;
  previewMetadata: boolean;
  /** A first message came: later feature_flags are ignored, as ComfyUI does. */
  answeredFlags?: boolean;
}

/** The flags ComfyUI v0.8.0 answers a client's feature_flags with (measured). */
export const SERVER_FEATURES = {
  supports_preview_metadata: true,
  max_upload_size: 104857600,
  extension: { manager: { supports_v4: true } },
};

interface WorkflowNode {
  id: string;
  classType: string;
  inputs: Record<string, unknown>;
}

function workflowNodes(prompt: Record<string, unknown>): WorkflowNode[] {
  return Object.entries(prompt)
    .filter(([, node]) => node && typeof node === 'object')
    .map(([id, node]) => {
      const record = node as { class_type?: unknown; inputs?: unknown };
      return {
        id,
        classType: typeof record.class_type === 'string' ? record.class_type : '',
        inputs:
          record.inputs && typeof record.inputs === 'object'
            ? (record.inputs as Record<string, unknown>)
            : {},
      };
    })
    .sort((a, b) => a.id.localeCompare(b.id, 'en', { numeric: true }));
}

export function mountGenerationEvents(
  server: SandboxServer,
  jobs: GenerationJobs,
  initialOptions: GenerationEventsOptions,
): GenerationEvents {
  const options: GenerationEventsOptions = { ...initialOptions };
  const peers = new Set<Peer>();
  /** Self-hosted servers keep one socket per clientId. */
  const byClient = new Map<string, Peer>();
  const sleepers = new Map<NodeJS.Timeout, () => void>();
  const waiting: SandboxJob[] = [];
  /**
   * Jobs submitted while autoRun is off, not run yet: waiting in the queue all the same, so the queue's count
   * holds them (a real server's does), and a held job cancelled makes it shorter.
   */
  const held = new Set<SandboxJob>();
  const queueCount = () => waiting.length + held.size + runningCount;
  const hangs = new Map<string, (goOn?: boolean) => void>();
  const runningIds = new Set<string>();
  let runningCount = 0;
  let framesSent = 0;
  const completionsSent = new Map<string, number>();
  let dropAt: number | undefined;
  let closed = false;

  const routing = () => options.routing ?? (jobs.selfHosted ? 'client' : 'key');
  const concurrency = () => options.concurrency ?? (routing() === 'client' ? 1 : Infinity);

  const write = (peer: Peer, frame: string | Buffer) => {
    if (peer.ws.readyState !== 1) return;
    peer.ws.send(frame);
    framesSent += 1;
    if (dropAt !== undefined && framesSent >= dropAt) {
      dropAt = undefined;
      for (const each of peers) each.ws.terminate();
    }
  };

  const targets = (job: SandboxJob, type: string): Peer[] => {
    if (routing() === 'key') return [...peers];
    if (job.clientId === undefined) return CLIENT_ONLY.has(type) ? [] : [...byClient.values()];
    const peer = byClient.get(job.clientId);
    return peer ? [peer] : [];
  };

  const emit = (job: SandboxJob, type: string, data: Record<string, unknown>) => {
    let stamp = {};
    if (options.stampCompletion && type === 'execution_success') {
      const sentAt = performance.timeOrigin + performance.now();
      completionsSent.set(job.id, sentAt);
      stamp = { sent_at: sentAt };
    }
    const text = JSON.stringify({ type, data: { ...data, ...stamp, prompt_id: job.id } });
    for (const peer of targets(job, type)) write(peer, text);
    jobs.emit('job-event', job, type, data);
  };

  /**
   * A self-hosted server broadcasts to the sockets in its table (one per clientId): a socket the table lost
   * (Comfy-Org/ComfyUI#16010) hears nothing more, though it stays open. The cloud: every socket of the key.
   */
  const broadcast = (type: string, data: Record<string, unknown>) => {
    const text = JSON.stringify({ type, data });
    for (const peer of routing() === 'client' ? [...byClient.values()] : [...peers]) write(peer, text);
  };

  const queueStatus = () => {
    if (options.statusEvents === false) return;
    broadcast('status', { status: { exec_info: { queue_remaining: queueCount() } } });
  };

  /** Waits; false when the job stopped meanwhile (cancelled, interrupted) or the sandbox closed. */
  const pause = (job: SandboxJob, ms = options.stepDelayMs ?? 2): Promise<boolean> =>
    new Promise((resolve) => {
      const timer = setTimeout(() => {
        sleepers.delete(timer);
        resolve(!closed && job.state === 'in_progress');
      }, ms);
      sleepers.set(timer, () => resolve(false));
    });

  const preview = (job: SandboxJob, node: WorkflowNode, kind?: number) => {
    for (const peer of targets(job, 'preview')) {
      if (kind === 4 || (kind === undefined && peer.previewMetadata)) {
        write(
          peer,
          encodePreviewWithMetadata(
            {
              node_id: node.id,
              display_node_id: node.id,
              real_node_id: node.id,
              prompt_id: job.id,
              parent_node_id: null,
            },
            TINY_PNG,
          ),
        );
      } else write(peer, encodePreview('jpeg', TINY_JPEG));
    }
    const seen: EnginePreview =
      kind === 1
        ? { imageType: 'jpeg', image: TINY_JPEG }
        : { nodeId: node.id, imageType: 'png', image: TINY_PNG };
    jobs.emit('job-preview', job, seen);
  };

  const outputFor = (job: SandboxJob, node: WorkflowNode, batch: number): Record<string, unknown> => {
    const prefix = typeof node.inputs.filename_prefix === 'string' ? node.inputs.filename_prefix : 'ComfyUI';
    const type = node.classType.startsWith('Preview') ? 'temp' : 'output';
    const isVideo = /Video|Animated/.test(node.classType);
    const isAudio = /Audio/.test(node.classType);
    const extension = isVideo ? 'mp4' : isAudio ? 'flac' : 'png';
    const ref: FileRef = {
      filename: `${prefix}_${job.number}_${node.id}_${batch}.${extension}`,
      subfolder: '',
      type,
    };
    jobs.files.set(fileKey(ref), {
      content: TINY_PNG,
      contentType: isVideo ? 'video/mp4' : isAudio ? 'audio/flac' : 'image/png',
    });
    return { [isVideo ? 'video' : isAudio ? 'audio' : 'images']: [ref] };
  };

  /**
   * As a real server (ComfyUI 0.3.7x, measured): a progress_state before each node runs and after it ends,
   * and one per sampler step; each lists every node of the job so far, not only the one that changed.
   */
  const nodeStates = new Map<string, Record<string, Record<string, unknown>>>();
  const progressState = (job: SandboxJob, node: WorkflowNode, value: number, max: number, state: string) => {
    let nodes = nodeStates.get(job.id);
    if (!nodes) nodeStates.set(job.id, (nodes = {}));
    nodes[node.id] = {
      value,
      max,
      state,
      node_id: node.id,
      prompt_id: job.id,
      display_node_id: node.id,
      parent_node_id: null,
      real_node_id: node.id,
    };
    emit(job, 'progress_state', { prompt_id: job.id, nodes });
  };

  const runNode = async (job: SandboxJob, node: WorkflowNode): Promise<'next' | 'stop'> => {
    const outcome = await runNodeSteps(job, node);
    if (outcome === 'next') progressState(job, node, 1, 1, 'finished');
    return outcome;
  };

  const runNodeSteps = async (job: SandboxJob, node: WorkflowNode): Promise<'next' | 'stop'> => {
    progressState(job, node, 0, 1, 'running');
    emit(job, 'executing', { node: node.id, display_node: node.id });
    if (!(await pause(job))) return 'stop';
    switch (node.classType) {
      case 'SandboxFail': {
        const exceptionType =
          typeof node.inputs.exception_type === 'string' ? node.inputs.exception_type : 'OOMError';
        const message = typeof node.inputs.message === 'string' ? node.inputs.message : 'sandbox failure';
        job.error = {
          exception_type: exceptionType,
          exception_message: message,
          traceback: [`  File "sandbox.py", line 1, in ${node.id}`, `${exceptionType}: ${message}`],
        };
        job.state = 'failed';
        emit(job, 'execution_error', {
          node_id: node.id,
          node_type: node.classType,
          executed: [],
          ...job.error,
          current_inputs: {},
          current_outputs: {},
        });
        emit(job, 'executing', { node: null });
        return 'stop';
      }
      case 'SandboxSlow':
        return (await pause(job, Number(node.inputs.ms) || 100)) ? 'next' : 'stop';
      case 'SandboxHang':
        // Until it is cancelled or interrupted (the job stops there), or released (it goes on to its end).
        return new Promise<'next' | 'stop'>((resolve) =>
          hangs.set(job.id, (goOn?: boolean) =>
            resolve(goOn === true && job.state === 'in_progress' ? 'next' : 'stop'),
          ),
        );
      case 'SandboxText':
        for (const peer of targets(job, 'text'))
          write(peer, encodeText(node.id, String(node.inputs.text ?? 'sandbox text')));
        return 'next';
      case 'SandboxPreview': {
        const count = Number(node.inputs.count) || 1;
        const kind = Number(node.inputs.kind) === 1 ? 1 : Number(node.inputs.kind) === 4 ? 4 : undefined;
        for (let i = 0; i < count; i++) preview(job, node, kind);
        return 'next';
      }
      default:
        break;
    }
    const steps = Number(node.inputs.steps);
    if (Number.isFinite(steps) && steps > 0) {
      const max = Math.min(steps, options.maxSteps ?? 3);
      for (let value = 1; value <= max; value++) {
        emit(job, 'progress', { value, max, node: node.id });
        progressState(job, node, value, max, 'running');
        if (options.previews !== false) preview(job, node);
        if (!(await pause(job))) return 'stop';
      }
    }
    if (SAVE_CLASS.test(node.classType)) {
      const batches = Math.max(1, Number(node.inputs.sandbox_batches) || 1);
      for (let batch = 0; batch < batches; batch++) {
        const output = outputFor(job, node, batch);
        const merged = (job.outputs[node.id] ??= {});
        for (const [key, list] of Object.entries(output)) {
          merged[key] = [...((merged[key] as unknown[] | undefined) ?? []), ...(list as unknown[])];
        }
        emit(job, 'executed', { node: node.id, display_node: node.id, output });
        if (!(await pause(job))) return 'stop';
      }
    }
    return 'next';
  };

  const runJob = async (job: SandboxJob) => {
    job.state = 'in_progress';
    job.startedAt = Date.now();
    queueStatus();
    emit(job, 'execution_start', { timestamp: Date.now() });
    emit(job, 'execution_cached', { nodes: [], timestamp: Date.now() });
    if (await pause(job)) {
      let outcome: 'next' | 'stop' = 'next';
      for (const node of workflowNodes(job.prompt)) {
        outcome = await runNode(job, node);
        if (outcome === 'stop') break;
      }
      if (outcome === 'next' && job.state === 'in_progress' && !closed) {
        job.state = 'completed';
        emit(job, 'execution_success', { timestamp: Date.now() });
        emit(job, 'executing', { node: null });
      }
    }
  };

  const pump = () => {
    while (!closed && waiting.length > 0 && runningCount < concurrency()) {
      const job = waiting.shift() as SandboxJob;
      if (job.state !== 'pending') continue;
      runningCount += 1;
      runningIds.add(job.id);
      void runJob(job).finally(() => {
        job.endedAt = Date.now();
        runningCount -= 1;
        runningIds.delete(job.id);
        hangs.delete(job.id);
        nodeStates.delete(job.id);
        jobs.emit('ended', job);
        if (!closed) {
          queueStatus();
          pump();
        }
      });
    }
  };

  const onSubmitted = (job: SandboxJob) => {
    // A real server tells every socket of each job queued, whether or not it runs it soon.
    if (options.autoRun === false) {
      held.add(job);
      return queueStatus();
    }
    waiting.push(job);
    queueStatus();
    pump();
  };

  const stopRunning = (job: SandboxJob) => {
    if (!runningIds.has(job.id)) {
      // A pending job leaves the queue quietly, as self-hosted servers do; only the count changes.
      const index = waiting.indexOf(job);
      if (index >= 0) waiting.splice(index, 1);
      held.delete(job);
      queueStatus();
      return;
    }
    emit(job, 'execution_interrupted', { node_id: '', node_type: '', executed: [] });
    emit(job, 'executing', { node: null });
    hangs.get(job.id)?.();
  };

  /** Empties the queue and wakes every pausing or hanging run, so each ends at its next step. */
  const stopAll = () => {
    waiting.length = 0;
    held.clear();
    for (const [timer, wake] of sleepers) {
      clearTimeout(timer);
      wake();
    }
    sleepers.clear();
    for (const wake of hangs.values()) wake();
    hangs.clear();
  };

  jobs.on('submitted', onSubmitted);
  jobs.on('cancel', stopRunning);
  jobs.on('interrupt', stopRunning);

  server.onUpgrade(
    '/ws',
    (ws, _req, url) => {
      const peer: Peer = {
        ws,
        clientId: url.searchParams.get('clientId') || randomUUID().replace(/-/g, ''),
        previewMetadata: false,
      };
      peers.add(peer);
      // A newer socket of the same clientId takes the older one's place in the table (the older stays open).
      byClient.set(peer.clientId, peer);
      ws.on('message', (data, isBinary) => {
        if (isBinary) return;
        try {
          const message = JSON.parse(String(data)) as { type?: string; data?: Record<string, unknown> };
          if (message.type === 'feature_flags' && !peer.answeredFlags) {
            // As ComfyUI: honoured as the first message only, and answered with the server's own flags.
            peer.answeredFlags = true;
            peer.previewMetadata = message.data?.supports_preview_metadata === true;
            write(peer, JSON.stringify({ type: 'feature_flags', data: SERVER_FEATURES }));
          }
          peer.answeredFlags = true;
        } catch {
          // Self-hosted servers ignore what they cannot read.
        }
      });
      ws.on('close', () => {
        peers.delete(peer);
        // As self-hosted servers do: the closing socket forgets its clientId, even if a newer one took it.
        byClient.delete(peer.clientId);
      });
      write(
        peer,
        JSON.stringify({
          type: 'status',
          data: {
            status: { exec_info: { queue_remaining: queueCount() } },
            sid: peer.clientId,
          },
        }),
      );
    },
    (_req, url) =>
      jobs.apiKey !== undefined && url.searchParams.get('token') !== jobs.apiKey ? 401 : undefined,
  );

  return {
    options,
    get framesSent() {
      return framesSent;
    },
    completionsSent,
    get sockets() {
      return peers.size;
    },
    broadcast,
    sendRaw(frame, clientId) {
      for (const peer of peers) if (clientId === undefined || peer.clientId === clientId) write(peer, frame);
    },
    dropSockets() {
      for (const peer of peers) peer.ws.terminate();
    },
    dropAfterFrames(frames) {
      dropAt = framesSent + frames;
    },
    run(jobId) {
      const job = jobs.jobs.get(jobId);
      if (!job || job.state !== 'pending') return;
      held.delete(job);
      waiting.push(job);
      queueStatus();
      pump();
    },
    releaseHangs() {
      const held = [...hangs.values()];
      hangs.clear();
      for (const release of held) release(true);
      return held.length;
    },
    restart() {
      for (const job of jobs.jobs.values()) job.state = 'failed';
      stopAll();
      jobs.jobs.clear();
      for (const peer of peers) peer.ws.terminate();
    },
    close() {
      closed = true;
      jobs.off('submitted', onSubmitted);
      jobs.off('cancel', stopRunning);
      jobs.off('interrupt', stopRunning);
      stopAll();
    },
  };
}
