/**
 * The cancels a config node has sent (queue nodes, timeouts), so its await-job nodes can tell a job the
 * user cancelled from one that was lost: a self-hosted server removes a pending job without an event and
 * then forgets it. Bounded; listeners hear each cancel as it is sent. No Node-RED inside.
 */

import { RecentMap } from './recent-map';

/**
 * `removed`: taken out of the queue (it will never run); `interrupted`: it was running and got the targeted
 * interrupt (it ends with `execution_interrupted`); `requested`: it was in no queue when cancelled.
 */
export type CancelKind = 'removed' | 'interrupted' | 'requested';

export type CancelListener = (promptId: string, kind: CancelKind) => void;

/** At least this many of the latest cancels are remembered. */
const REMEMBERED = 4096;

export class CancelRegistry {
  private readonly kinds = new RecentMap<string, CancelKind>(REMEMBERED);
  private readonly listeners = new Set<CancelListener>();

  /** Records cancels and tells every listener. */
  note(promptIds: string[], kind: CancelKind): void {
    for (const id of promptIds) {
      this.kinds.set(id, kind);
      for (const listener of [...this.listeners]) {
        try {
          listener(id, kind);
        } catch {
          // a listener's failure is its own; the cancel stands for the others
        }
      }
    }
  }

  /** How the job was cancelled, if it was. */
  kindOf(promptId: string): CancelKind | undefined {
    return this.kinds.get(promptId);
  }

  /** The returned function removes exactly this listener. */
  listen(listener: CancelListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}
