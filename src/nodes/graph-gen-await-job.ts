/**
 * graph-gen-await-job: waits for jobs (any number at once) over the config node's shared socket and sends
 * the result on output 1 (completed), output 2 (failed, cancelled, timeout) and, when enabled, every live
 * event on output 3. The following itself is done by JobTracker; this file reads settings and msgs, sends
 * and keeps the status.
 */
import type { Node, NodeAPI, NodeDef, NodeMessage, NodeMessageInFlow, NodeStatus } from 'node-red';
import { invalidInput } from '../http/errors';
import { JobTracker, type JobProgress, type JobResult } from '../generation/jobs/job-tracker';
import { filesOf, nodeIdsNamed } from '../generation/jobs/job-outputs';
import { catalogTexts, evaluateProperty, fail, statusFailed, statusWaiting, statusOk } from './node-helpers';
import { editorPicture } from './editor-picture';
import type graphGenConfig from './graph-gen-config';

interface AwaitJobDef extends NodeDef {
  server: string;
  timeout?: string;
  timeoutType?: string;
  cancelOnTimeout?: boolean;
  progress?: boolean;
  previewRate?: number | string;
  /** Which files `payload.files` lists: all, saved only (type output), or those of some nodes. */
  filesFrom?: 'all' | 'saved' | 'nodes';
  /** For `nodes`: node ids or titles, separated by commas. */
  fileNodes?: string;
  /** Show the last output image under the node in the editor (editor-picture.ts). */
  picture?: boolean;
}

type Send = (msg: Array<NodeMessage | null>) => void;
type Done = (error?: Error) => void;

/** Status updates at most this often: events can come by the thousand per second. */
const STATUS_INTERVAL_MS = 150;
const DEFAULT_PREVIEW_RATE = 2;
/** The longest a Node.js timer waits (2^31 - 1 ms, about 24.8 days); a longer one fires at once. */
const MAX_TIMER_MS = 2 ** 31 - 1;

export = function (RED: NodeAPI): void {
  // A result's status asks for a text per job: the lookups are cached.
  const text = catalogTexts(RED, 'graph-gen-await-job');

  function GraphGenAwaitJob(this: Node, def: AwaitJobDef): void {
    RED.nodes.createNode(this, def);
    setUp(this, def);
  }

  function setUp(node: Node, def: AwaitJobDef): void {
    const config = RED.nodes.getNode(def.server) as graphGenConfig.GraphGenConfigNode | null;
    const progressEnabled = def.progress === true;
    const rate = Number(def.previewRate);
    const previewsPerSecond = Number.isFinite(rate) && rate >= 0 ? rate : DEFAULT_PREVIEW_RATE;
    const filesFrom = def.filesFrom === 'saved' || def.filesFrom === 'nodes' ? def.filesFrom : 'all';
    const fileNodes = (def.fileNodes ?? '')
      .split(',')
      .map((name) => name.trim())
      .filter(Boolean);
    let lastOutcome: NodeStatus = {};
    let statusTimer: NodeJS.Timeout | undefined;
    let closing = false;
    const picture = editorPicture(RED, node, def.picture === true);

    // A config whose settings make no connection says why; a missing config, to pick one.
    const noConfig = config?.settingsError ? text('status.bad-config') : text('status.no-config');
    if (!config?.connection) node.status(statusFailed(noConfig));

    const tracker = config?.connection
      ? new JobTracker(config.connection, {
          previewsPerSecond,
          // Without progress output, the config's socket need not read previews for this node.
          progress: progressEnabled,
          onChange: () => scheduleStatus(),
          log: (level, message) => (level === 'warn' ? node.warn(message) : node.debug(message)),
        })
      : undefined;
    tracker?.start();

    function currentStatus(): NodeStatus {
      if (!tracker) return statusFailed(noConfig);
      if (tracker.connectionState === 'unauthorized') return statusFailed(text('status.unauthorized'));
      const summary = tracker.summary();
      if (summary.jobs === 0) return lastOutcome;
      const latest = summary.latestRunning;
      if (latest) {
        const step = latest.step ? ` ${latest.step.value}/${latest.step.max}` : '';
        const label = `${text('status.running')} ${latest.node ?? ''}${step}`;
        return statusOk(label.replace(/\s+/g, ' ').trim());
      }
      if (tracker.connectionState === 'down') return statusWaiting(text('status.reconnecting'));
      const queued = tracker.queueRemaining ?? summary.jobs;
      return statusWaiting(`${text('status.queued')} ${queued}`);
    }

    function scheduleStatus(): void {
      if (statusTimer || closing) return;
      statusTimer = setTimeout(() => {
        statusTimer = undefined;
        if (!closing) node.status(currentStatus());
      }, STATUS_INTERVAL_MS);
    }

    function finished(msg: NodeMessage, result: JobResult, send: Send, done: Done): void {
      (msg as { prompt_id?: string }).prompt_id = result.prompt_id;
      if (result.outputs && filesFrom !== 'all') {
        // Titles are read from the workflow the submit node sent along (msg.workflow).
        const nodes =
          filesFrom === 'nodes'
            ? nodeIdsNamed(fileNodes, (msg as { workflow?: unknown }).workflow)
            : undefined;
        result.files = filesOf(result.outputs, { savedOnly: filesFrom === 'saved', nodes });
      }
      msg.payload = result;
      if (result.status === 'completed') {
        lastOutcome = statusOk(text('status.done'));
        send([msg, null, null]);
        if (config?.connection) picture?.showLastImage(config.connection, result.files);
      } else {
        const reason =
          result.status === 'failed'
            ? (result.error?.exception_type ?? text('status.failed'))
            : text(result.status === 'cancelled' ? 'status.cancelled' : 'status.timeout');
        lastOutcome = statusFailed(reason);
        send([null, msg, null]);
      }
      scheduleStatus();
      done();
    }

    function progressMessage(msg: NodeMessage, progress: JobProgress): NodeMessage {
      const out: NodeMessage & Record<string, unknown> = {
        ...msg,
        topic: progress.topic,
        payload: progress.payload,
        prompt_id: progress.prompt_id,
      };
      if (progress.image_type) out.image_type = progress.image_type;
      if (progress.metadata) out.metadata = progress.metadata;
      if (progress.node !== undefined) out.node = progress.node;
      return out;
    }

    async function handle(msg: NodeMessageInFlow, send: Send, done: Done): Promise<void> {
      if (!tracker) throw invalidInput(config?.settingsError ?? text('errors.no-config'));
      const payload = msg.payload as { prompt_id?: unknown } | undefined;
      const promptId =
        (msg as { prompt_id?: unknown }).prompt_id ??
        (payload && typeof payload === 'object' ? payload.prompt_id : undefined);
      if (typeof promptId !== 'string' || promptId.trim() === '')
        throw invalidInput(text('errors.no-prompt-id'));
      const fromMsg = (msg as { timeout?: unknown }).timeout;
      const timeoutValue =
        fromMsg !== undefined
          ? fromMsg
          : await evaluateProperty(RED, node, msg, def.timeout, def.timeoutType ?? 'num');
      const seconds = timeoutValue === undefined || timeoutValue === '' ? 0 : Number(timeoutValue);
      if (!Number.isFinite(seconds) || seconds < 0) throw invalidInput(text('errors.bad-timeout'));
      if (seconds * 1000 > MAX_TIMER_MS) throw invalidInput(text('errors.long-timeout'));
      const base: NodeMessage = { ...msg };
      delete base.payload;
      const result = await tracker.track(promptId.trim(), {
        timeoutMs: seconds * 1000,
        cancelOnTimeout: def.cancelOnTimeout === true,
        onProgress: progressEnabled
          ? (progress) => send([null, null, progressMessage(base, progress)])
          : undefined,
        // Sent the moment the job ends, not a microtask later.
        onEnd: (ended) => finished(msg, ended, send, done),
      });
      // No result: the node is closing, and the msg ends here.
      if (!result) done();
    }

    node.on('input', (msg, send, done) => {
      handle(msg, send as Send, done).catch((error: unknown) => fail(node, done, error));
    });

    node.on('close', (_removed: boolean, done: () => void) => {
      closing = true;
      clearTimeout(statusTimer);
      tracker?.close();
      picture?.close();
      done();
    });
  }

  RED.nodes.registerType('graph-gen-await-job', GraphGenAwaitJob);
};
