/**
 * Where an await-job node keeps the jobs it awaits so they are awaited again after Node-RED restarts (setting
 * "resume after a restart"): one journal per node under `<userDir>/graph-gen/`, the msg of each await as
 * kept-awaits.ts keeps it. A node removed from the flows (deleted or disabled, or gone from the flows file while
 * Node-RED was down) has its journal removed. Writes are batched (persist/journal.ts): one per await and end at
 * most, fewer in a burst, never one per event.
 */
import type { NodeAPI } from 'node-red';
import { Journal } from '../persist/journal';
import { keptMessage, restoredMessage, type KeptAwait } from '../generation/jobs/kept-awaits';
import { nodeFile, sweepNodeFiles } from './node-state';

const PREFIX = 'await-job-';
const SUFFIX = '.jsonl';

/** One node's kept awaits, keyed per msg (one job may be awaited by several msgs). */
export class KeptAwaits {
  private constructor(private readonly journal: Journal<KeptAwait>) {}

  static async open(RED: NodeAPI, nodeId: string, log: (message: string) => void): Promise<KeptAwaits> {
    sweepNodeFiles(RED, 'graph-gen-await-job', PREFIX, SUFFIX);
    const journal = await Journal.open<KeptAwait>(nodeFile(RED, PREFIX, nodeId, SUFFIX), { log });
    return new KeptAwaits(journal);
  }

  /** The awaits kept when the node last stopped: key, job, config node, msg, deadline. */
  kept(): Array<{
    key: string;
    promptId: string;
    config: string;
    msg: Record<string, unknown>;
    deadline?: number;
  }> {
    return this.journal.entries().map(([key, entry]) => ({
      key,
      promptId: key.slice(0, key.lastIndexOf('#')),
      config: entry.config,
      msg: restoredMessage(entry.msg),
      deadline: entry.deadline,
    }));
  }

  /** Keeps an await; the returned key forgets it. `omitted` names the msg properties not kept. */
  add(
    promptId: string,
    config: string,
    msg: Record<string, unknown>,
    deadline: number | undefined,
  ): { key: string; omitted: string[] } {
    const key = `${promptId}#${String(msg._msgid ?? '')}${Math.random().toString(36).slice(2, 8)}`;
    const kept = keptMessage(msg);
    this.journal.set(key, { config, msg: kept.msg, ...(deadline !== undefined ? { deadline } : {}) });
    return { key, omitted: kept.omitted };
  }

  forget(key: string): void {
    this.journal.delete(key);
  }

  /** The node stops but stays in the flows: what is kept is written, for the next start. */
  close(): Promise<void> {
    return this.journal.close();
  }

  /** The node was removed from the flows: its kept awaits go. */
  destroy(): Promise<void> {
    return this.journal.destroy();
  }
}
