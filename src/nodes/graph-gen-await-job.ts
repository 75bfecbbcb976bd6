/**
 * graph-gen-await-job: waits for jobs (any number at once) over the config node's shared socket and sends
 * the result on output 1 (completed), output 2 (failed, cancelled, timeout) and, when enabled, every live
 * event on output 3. The following itself is done by JobTracker; this file reads settings and msgs, sends,
 * keeps the status (what it shows: graph-gen-await-job-status.ts), and keeps what it awaits for after a restart
 * (await-resume.ts).
 */
import type { Node, NodeAPI, NodeDef, NodeMessage, NodeMessageInFlow, NodeStatus } from 'node-red';
import { invalidInput } from '../http/errors';
import { JobTracker, type JobProgress, type JobResult } from '../generation/jobs/job-tracker';
import { MAX_JOB_ID_LENGTH, readJobId } from '../generation/jobs/job-ids';
import { filesOf, nodeIdsNamed } from '../generation/jobs/job-outputs';
import { fitsTimer } from '../timers';
import { KeptAwaits } from './await-resume';
import { asServiceError, catalogTexts, evaluateProperty, fail, statusFailed, statusOk } from './node-helpers';
import { editorPicture } from './editor-picture';
import { generationTarget, jobConnection, type GenerationTarget } from './generation-target';
import type { GenerationConnection } from '../generation/connection';
import { validateWorkflow } from '../generation/workflows/workflow';
import { errorText, textOf } from '../boundary/outside';
import { migrateConfig } from './config-versions';
import { awaitStatus } from './graph-gen-await-job-status';

/** The settings, each present: migrateConfig (config-versions.ts) gives an older node its old defaults. */
interface AwaitJobDef extends NodeDef {
  server: string;
  /** A graph-gen-pool node: each job is awaited on its own server (then `server` is not used). */
  pool: string;
  /** Through a pool: a job its server lost is submitted once more to another server (msg.attempt counts). */
  runAgain: boolean;
  timeout: string;
  timeoutType: string;
  cancelOnTimeout: boolean;
  progress: boolean;
  previewRate: number | string;
  /** Which files `payload.files` lists: all, saved only (type output), or those of some nodes. */
  filesFrom: 'all' | 'saved' | 'nodes';
  /** For `nodes`: node ids or titles, separated by commas. */
  fileNodes: string;
  /** Awaits go on after Node-RED restarts. */
  resume: boolean;
  /** Show the last output image under the node in the editor (editor-picture.ts). */
  picture: boolean;
}

type Send = (msg: Array<NodeMessage | null>) => void;
type Done = (error?: Error) => void;

/** Status updates at most this often: events can come by the thousand per second. */
const STATUS_INTERVAL_MS = 150;
const DEFAULT_PREVIEW_RATE = 2;

/** A result that says the job's server lost it (job-life.ts's `lost`). */
function isLost(result: JobResult): boolean {
  return result.status === 'failed' && result.error?.exception_type === 'JobLost';
}

/** The tries so far (msg.attempt), 1 when not counted yet. */
function attemptOf(msg: NodeMessage): number {
  const attempt = (msg as { attempt?: unknown }).attempt;
  return typeof attempt === 'number' && Number.isFinite(attempt) ? attempt : 1;
}

/** A msg's timeout as a number of seconds: NaN for what is not a number or text (a Number() of it may throw). */
function secondsOf(value: unknown): number {
  if (value === undefined || value === '') return 0;
  return typeof value === 'number' || typeof value === 'string' ? Number(value) : NaN;
}

export = function (RED: NodeAPI): void {
  // A result's status asks for a text per job: the lookups are cached.
  const text = catalogTexts(RED, 'graph-gen-await-job');
  // "2 of 3 servers": the pool's words, as every node through a pool says them (generation-target.ts).
  const poolText = catalogTexts(RED, 'graph-gen-pool');

  function GraphGenAwaitJob(this: Node, saved: NodeDef): void {
    RED.nodes.createNode(this, saved);
    setUp(
      this,
      migrateConfig<AwaitJobDef>('graph-gen-await-job', saved, (newer) =>
        this.warn(text('warnings.newer-settings', newer)),
      ),
    );
  }

  function setUp(node: Node, def: AwaitJobDef): void {
    let target: GenerationTarget | undefined;
    let targetError: string | undefined;
    try {
      target = generationTarget(RED, def, text);
    } catch (error) {
      targetError = asServiceError(error).message;
    }
    const pool = target?.pool;
    // What kept awaits are kept under: a node whose server or pool was changed does not resume them.
    const configKey = def.pool || def.server;
    const runAgain = def.runAgain === true && pool !== undefined;
    const progressEnabled = def.progress === true;
    // Read as text first: a saved flow may hold anything here, and Number() of an object may throw.
    const rateText = textOf(def.previewRate);
    const rate = rateText === undefined ? NaN : Number(rateText);
    const previewsPerSecond = Number.isFinite(rate) && rate >= 0 ? rate : DEFAULT_PREVIEW_RATE;
    const filesFrom = def.filesFrom === 'saved' || def.filesFrom === 'nodes' ? def.filesFrom : 'all';
    const fileNodes = (textOf(def.fileNodes) ?? '')
      .split(',')
      .map((name) => name.trim())
      .filter(Boolean);
    let lastOutcome: NodeStatus = {};
    let statusTimer: NodeJS.Timeout | undefined;
    /** Aborted when the node closes (a redeploy): what it still does stops. */
    const closing = new AbortController();
    const picture = editorPicture(RED, node, def.picture === true);

    // A config whose settings make no connection says why; a missing config, to pick one.
    const noConfig =
      targetError && targetError !== text('errors.no-config')
        ? text('status.bad-config')
        : text('status.no-config');
    if (!target) node.status(statusFailed(noConfig));

    /** One tracker per server (one, or each of the pool's), each on its server's shared socket. */
    const trackers = new Map<GenerationConnection, JobTracker>();
    function trackerOf(connection: GenerationConnection): JobTracker {
      let tracker = trackers.get(connection);
      if (!tracker) {
        tracker = new JobTracker(connection, {
          previewsPerSecond,
          // Without progress output, the config's socket need not read previews for this node.
          progress: progressEnabled,
          onChange: () => scheduleStatus(),
          log: (level, message) => (level === 'warn' ? node.warn(message) : node.debug(message)),
        });
        tracker.start();
        trackers.set(connection, tracker);
      }
      return tracker;
    }
    if (target?.connection) trackerOf(target.connection);
    for (const member of pool?.members ?? []) trackerOf(member.connection);
    const stopPoolWatch = pool?.onUpChange(() => scheduleStatus());

    function currentStatus(): NodeStatus {
      if (!target) return statusFailed(noConfig);
      return awaitStatus([...trackers.values()], pool, lastOutcome, text, poolText);
    }

    function scheduleStatus(): void {
      if (statusTimer || closing.signal.aborted) return;
      statusTimer = setTimeout(() => {
        statusTimer = undefined;
        if (!closing.signal.aborted) node.status(currentStatus());
      }, STATUS_INTERVAL_MS);
    }

    function finished(
      msg: NodeMessage,
      result: JobResult,
      send: Send,
      connection: GenerationConnection,
    ): void {
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
        picture?.showLastImage(connection, result.files);
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
      if (!target) return;
      let job: { connection: GenerationConnection; server?: { id: string; name: string } };
      try {
        job = await jobConnection(target, promptId, (msg as { server?: unknown }).server);
      } catch (error) {
        // A resumed await whose server left the pool: said, and not kept any longer.
        if (key) kept?.forget(key);
        node.warn(errorText(error));
        return;
      }
      if (job.server) (msg as { server?: unknown }).server = job.server;
      const tracker = trackerOf(job.connection);
      const base: NodeMessage = { ...msg };
      delete base.payload;
      let again: Promise<void> | undefined;
      await tracker.track(promptId, {
        timeoutMs,
        cancelOnTimeout: def.cancelOnTimeout === true,
        onProgress: progressEnabled
          ? (progress) => send([null, null, progressMessage(base, progress)])
          : undefined,
        onEnd: (ended) => {
          if (runAgain && isLost(ended) && attemptOf(msg) < 2 && job.server) {
            again = runElsewhere(msg, ended, job.server.id, timeoutMs, send, key, job.connection);
            return;
          }
          finished(msg, ended, send, job.connection);
          // Forgotten once sent: a stop in between sends it again after the restart (the help says so).
          if (key) kept?.forget(key);
        },
      });
      if (again) await again;
    }

    /**
     * "Run again elsewhere once": the job its server lost is submitted once more (msg.workflow, as the submit node
     * sent it) to another server of the pool able to run it, and awaited there; msg.attempt counts the tries. When
     * it cannot be sent again, the lost result goes out as it would have, and the node says why.
     */
    async function runElsewhere(
      msg: NodeMessage,
      lost: JobResult,
      lostOn: string,
      timeoutMs: number,
      send: Send,
      key: string | undefined,
      connection: GenerationConnection,
    ): Promise<void> {
      const fields = msg as {
        workflow?: unknown;
        partner?: unknown;
        prompt_id?: unknown;
        server?: unknown;
        attempt?: unknown;
      };
      let submitted: Awaited<ReturnType<NonNullable<typeof pool>['submit']>>;
      try {
        const workflow = validateWorkflow(fields.workflow);
        submitted = await pool!.submit(
          workflow,
          { partner: fields.partner === true, exclude: new Set([lostOn]) },
          closing.signal,
        );
      } catch (error) {
        if (!closing.signal.aborted) {
          node.warn(text('warnings.not-run-again', { id: lost.prompt_id, error: errorText(error) }));
          finished(msg, lost, send, connection);
          if (key) kept?.forget(key);
        }
        return;
      }
      const { result, member } = submitted;
      node.debug(
        `graph-gen: job ${lost.prompt_id} was lost on its server; sent again to ${member.name} as ${result.prompt_id}`,
      );
      fields.prompt_id = result.prompt_id;
      fields.server = pool!.refOf(member);
      fields.attempt = attemptOf(msg) + 1;
      if (key) kept?.forget(key);
      const deadline = timeoutMs > 0 ? Date.now() + timeoutMs : undefined;
      const next = kept?.add(result.prompt_id, configKey, msg as Record<string, unknown>, deadline).key;
      await follow(msg, result.prompt_id, timeoutMs, send, next);
    }

    async function handle(msg: NodeMessageInFlow, send: Send, done: Done): Promise<void> {
      if (!target) throw invalidInput(targetError ?? text('errors.no-config'));
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
          : await evaluateProperty(RED, node, msg, def.timeout, def.timeoutType);
      const seconds = secondsOf(timeoutValue);
      if (!Number.isFinite(seconds) || seconds < 0) throw invalidInput(text('errors.bad-timeout'));
      if (!fitsTimer(seconds * 1000)) throw invalidInput(text('errors.long-timeout'));
      const id = promptId.trim();
      if (pool) {
        // Refused now (not after the kept await is written) when the pool cannot tell the job's server; named in
        // the msg (and so in the kept await) when it can.
        (msg as { server?: unknown }).server = (
          await jobConnection(target, id, (msg as { server?: unknown }).server)
        ).server;
        if (runAgain && typeof (msg as { attempt?: unknown }).attempt !== 'number')
          (msg as { attempt?: unknown }).attempt = 1;
      }
      await keptReady;
      if (closing.signal.aborted) {
        done();
        return;
      }
      const key = kept?.add(
        id,
        configKey,
        msg as Record<string, unknown>,
        seconds > 0 ? Date.now() + seconds * 1000 : undefined,
      ).key;
      await follow(msg, id, seconds * 1000, send, key);
      done();
    }

    /** The awaits kept when the node last stopped are awaited again; their results carry `msg.resumed`. */
    function resumeKept(): void {
      if (!kept || !target) return;
      const send: Send = (msgs) => node.send(msgs);
      for (const entry of kept.kept()) {
        // Kept through another config node (the node's server was changed): not this server's job.
        if (entry.config !== configKey) {
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
      def.resume === true && target
        ? KeptAwaits.open(RED, node.id, (message) => node.warn(message)).then(
            (opened) => {
              kept = opened;
              if (!closing.signal.aborted) resumeKept();
            },
            (error: unknown) =>
              node.warn(`graph-gen: the awaits kept for a restart cannot be read: ${errorText(error)}`),
          )
        : Promise.resolve();

    node.on('input', (msg, send, done) => {
      handle(msg, send as Send, done).catch((error: unknown) => fail(node, done, error));
    });

    node.on('close', (removed: boolean, done: () => void) => {
      closing.abort();
      clearTimeout(statusTimer);
      stopPoolWatch?.();
      // Ends the awaits with no result: they stay kept for the next start, unless the node is gone for good.
      for (const tracker of trackers.values()) tracker.close();
      picture?.close();
      void keptReady
        .then(() => (removed ? kept?.destroy() : kept?.close()))
        .catch(() => undefined)
        .then(() => done());
    });
  }

  RED.nodes.registerType('graph-gen-await-job', GraphGenAwaitJob);
};
