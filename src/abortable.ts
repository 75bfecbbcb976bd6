/**
 * Waiting for shared work with a signal of one's own: the wait stops when the signal aborts, the work goes on for
 * whoever else waits for it (a node definitions read a dialog, a submit and a pool share). No Node-RED inside.
 */

/**
 * `promise`, or a rejection with the signal's reason as soon as it aborts. Its listener goes when the promise
 * settles: a signal may live long (a msg's, a node's), and must not gather one listener per wait.
 */
export function abortable<T>(promise: Promise<T>, signal?: AbortSignal): Promise<T> {
  if (!signal) return promise;
  signal.throwIfAborted();
  return new Promise<T>((resolve, reject) => {
    const stop = () => reject(signal.reason as Error);
    signal.addEventListener('abort', stop, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', stop));
  });
}
