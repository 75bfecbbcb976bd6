/**
 * graph-gen-await-job: waits for jobs (any number at once) over the config node's shared socket and sends
 * the result on output 1 (completed), output 2 (failed, cancelled, timeout) and, when enabled, every live
 * event on output 3. The following itself is done by JobTracker; this file reads settings and msgs, sends,
 * keeps the status, and keeps what it awaits for after a restart (await-resume.ts).
 */
import type { Node, NodeAPI, NodeDef, NodeMessage, NodeMessageInFlow, NodeStatus } from 'node-red';
import { invalidInput } from '../http/errors';
import { JobTracker, type JobProgress, type JobResult } from '../generation/jobs/job-tracker';
import { MAX_JOB_ID_LENGTH, readJobId } from '../generation/jobs/job-ids';
import { filesOf, nodeIdsNamed } from '../generation/jobs/job-outputs';
import { fitsTimer } from '../timers';
import { KeptAwaits } from './await-resume';
import { catalogTexts, evaluateProperty, fail, statusFailed, statusWaiting, statusOk } from './node-helpers';
import { editorPicture } from './editor-picture';
import type graphGenConfig from './graph-gen-config';
import { errorText } from '../boundary/outside';

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
  /** Awaits go on after Node-RED restarts (absent on nodes saved before the setting: on). */
  resume?: boolean;
  /** Show the last output image under the node in the editor (editor-picture.ts). */
  picture?: boolean;
}

type Send = (msg: Array<NodeMessage | null>) => void;
type Done = (error?: Error) => void;

/** Status updates at most this often: events can come by the thousand per second. */
const STATUS_INTERVAL_MS = 150;
const DEFAULT_PREVIEW_RATE = 2;

/** A msg's timeout as a number of seconds: NaN for what is not a number or text (a Number() of it may throw). */
function secondsOf(value: unknown): number {
  if (value === undefined || value === '') return 0;
  return typeof value === 'number' || typeof value === 'string' ? Number(value) : NaN;
}

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
      if (summary.nearestAhead !== undefined)
        return statusWaiting(text('status.ahead', { ahead: summary.nearestAhead }));
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

    function finished(msg: NodeMessage, result: JobResult, send: Send): void {
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

    /**
     * Follows one job for one msg: its result is sent the moment the job ends (not a microtask later), then the
     * kept await is forgotten. Resolves when the job ended or the node closed.
     */
    async function follow(
      msg: NodeMessage,
      promptId: string,
      timeoutMs: number,
      send: Send,
      key?: string,
    ): Promise<void> {
      if (!tracker) return;
      const base: NodeMessage = { ...msg };
      delete base.payload;
      await tracker.track(promptId, {
        timeoutMs,
        cancelOnTimeout: def.cancelOnTimeout === true,
        onProgress: progressEnabled
          ? (progress) => send([null, null, progressMessage(base, progress)])
          : undefined,
        onEnd: (ended) => {
          finished(msg, ended, send);
          // Forgotten once sent: a stop in between sends it again after the restart (the help says so).
          if (key) kept?.forget(key);
        },
      });
    }

    async function handle(msg: NodeMessageInFlow, send: Send, done: Done): Promise<void> {
      if (!tracker) throw invalidInput(config?.settingsError ?? text('errors.no-config'));
      const payload = msg.payload as { prompt_id?: unknown } | undefined;
      const promptId =
        (msg as { prompt_id?: unknown }).prompt_id ??
        (payload && typeof payload === 'object' ? payload.prompt_id : undefined);
      if (typeof promptId !== 'string' || promptId.trim() === '')
        throw invalidInput(text('errors.no-prompt-id'));
      if (!readJobId(promptId.trim()).ok) {
        throw invalidInput(
          text('errors.long-prompt-id', { length: promptId.trim().length, most: MAX_JOB_ID_LENGTH }),
        );
      }
      const fromMsg = (msg as { timeout?: unknown }).timeout;
      const timeoutValue =
        fromMsg !== undefined
          ? fromMsg
          : await evaluateProperty(RED, node, msg, def.timeout, def.timeoutType ?? 'num');
      const seconds = secondsOf(timeoutValue);
      if (!Number.isFinite(seconds) || seconds < 0) throw invalidInput(text('errors.bad-timeout'));
      if (!fitsTimer(seconds * 1000)) throw invalidInput(text('errors.long-timeout'));
      const id = promptId.trim();
      await keptReady;
      if (closing) {
        done();
        return;
      }
      const key = kept?.add(
        id,
        def.server,
        msg as Record<string, unknown>,
        seconds > 0 ? Date.now() + seconds * 1000 : undefined,
      ).key;
      await follow(msg, id, seconds * 1000, send, key);
      done();
    }

    /** The awaits kept when the node last stopped are awaited again; their results carry `msg.resumed`. */
    function resumeKept(): void {
      if (!kept || !tracker) return;
      const send: Send = (msgs) => node.send(msgs);
      for (const entry of kept.kept()) {
        // Kept through another config node (the node's server was changed): not this server's job.
        if (entry.config !== def.server) {
          kept.forget(entry.key);
          continue;
        }
        const msg = { ...entry.msg, resumed: true } as NodeMessage;
        // A time limit that ran out while Node-RED was down ends the await at once.
        const timeoutMs = entry.deadline === undefined ? 0 : Math.max(1, entry.deadline - Date.now());
        void follow(msg, entry.promptId, timeoutMs, send, entry.key);
      }
    }

    let kept: KeptAwaits | undefined;
    const keptReady: Promise<void> =
      def.resume !== false && tracker
        ? KeptAwaits.open(RED, node.id, (message) => node.warn(message)).then(
            (opened) => {
              kept = opened;
              if (!closing) resumeKept();
            },
            (error: unknown) =>
              node.warn(`graph-gen: the awaits kept for a restart cannot be read: ${errorText(error)}`),
          )
        : Promise.resolve();

    node.on('input', (msg, send, done) => {
      handle(msg, send as Send, done).catch((error: unknown) => fail(node, done, error));
    });

    node.on('close', (removed: boolean, done: () => void) => {
      closing = true;
      clearTimeout(statusTimer);
      // Ends the awaits with no result: they stay kept for the next start, unless the node is gone for good.
      tracker?.close();
      picture?.close();
      void keptReady
        .then(() => (removed ? kept?.destroy() : kept?.close()))
        .catch(() => undefined)
        .then(() => done());
    });
  }

  RED.nodes.registerType('graph-gen-await-job', GraphGenAwaitJob);
};
