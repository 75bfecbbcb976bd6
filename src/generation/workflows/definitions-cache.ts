/**
 * The node definitions the editor's dialogs show (the submit dialog's form, its dropdowns and the check of
 * values the server does not offer): read from a server's `GET /api/object_info`, and answered as sentences
 * when they cannot be had. A deployed config node's are the ones its connection holds (shared with its
 * submit nodes); settings typed in a dialog get a cache of their own, per config node, address and key.
 * Either way they are read again after 10 minutes, and a Refresh reads them at most once per 10 s. No
 * Node-RED inside.
 */
import { createHash } from 'node:crypto';
import { DIALOG_WAIT_MS, dialogClient, type DialogTarget } from '../dialog-client';
import type { Credential } from '../../http/auth';
import { failedOnTheWay } from '../../http/client';
import { ServiceError } from '../../http/errors';
import { errorText, setOwn } from '../../boundary/outside';
import { displayNameOf, inputSpecsOf, type InputSpec } from './node-definitions';
import type { GenerationConnection } from '../connection';
import { GenerationRestClient } from '../transfer/rest-client';
import type { NodeTypeDefinition } from './workflow';

export type NodeDefinitions = Record<string, NodeTypeDefinition>;

/** Where to read definitions from: the settings of one config node (as deployed, or as typed in its dialog). */
export interface DefinitionsSource extends DialogTarget {
  /** The config node's id ('' for one that has none yet). */
  configId: string;
  /** The largest answer read (object_info of a server with many custom nodes runs to megabytes). */
  maxBytes?: number;
}

/** What the editor needs of one node type: its name to show and its value inputs, in the graph editor's order. */
export interface EditorDefinition {
  title: string;
  inputs: InputSpec[];
}

const DEFAULT_MAX_BYTES = 64 * 1024 * 1024;

/** The sentence a dialog shows when the definitions cannot be read, by error code. */
function sentenceFor(error: ServiceError, host: string, credential: Credential): string {
  switch (error.code) {
    case 'unauthorized':
      return credential.refusedBy(host, ', so its node definitions cannot be shown');
    case 'network':
      if (failedOnTheWay(error)) return `The node definitions cannot be shown: ${error.message}.`;
      return `${host} could not be reached, so its node definitions cannot be shown: check the address and that the service is running.`;
    case 'invalid_input':
      return error.message;
    default:
      return `${host} did not give its node definitions (${error.message}).`;
  }
}

/** How old the definitions a dialog shows may get, how often a Refresh may read them, how long a dialog waits. */
export const DIALOG_DEFINITIONS = {
  maxAgeMs: 10 * 60_000,
  /** Anyone who may open a dialog may press Refresh: each read is a download of megabytes for the server. */
  refreshLimitMs: 10_000,
  /** A server that does not answer gets a sentence, not a hung form. */
  waitMs: DIALOG_WAIT_MS,
};

/** A failed read as a ServiceError of the same code whose message is the sentence a dialog shows. */
function definitionsFailure(
  error: unknown,
  host: string,
  credential: Credential,
  clean: (text: string) => string,
) {
  const serviceError =
    error instanceof ServiceError ? error : new ServiceError('network', clean(errorText(error)));
  return new ServiceError(serviceError.code, sentenceFor(serviceError, host, credential));
}

/**
 * The definitions a deployed config node's connection holds (what its submit nodes read): shared, not
 * copied. Read again when older than `DIALOG_DEFINITIONS.maxAgeMs`, or on `refresh` when older than
 * `DIALOG_DEFINITIONS.refreshLimitMs`.
 */
export async function connectionDefinitions(
  connection: GenerationConnection,
  refresh: boolean,
): Promise<NodeDefinitions> {
  const { baseUrl } = connection.settings;
  const host = new URL(baseUrl).host;
  const waited = Math.round(DIALOG_DEFINITIONS.waitMs / 1000);
  const tooLate = new ServiceError(
    'network',
    `${host} did not send its node definitions within ${waited} s, so they cannot be shown yet: check that the service is running, then refresh.`,
  );
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      connection.definitions().nodeDefinitions({
        olderThanMs: refresh ? DIALOG_DEFINITIONS.refreshLimitMs : DIALOG_DEFINITIONS.maxAgeMs,
      }),
      // The connection's own timeouts and retries are for flows; the dialog stops waiting sooner (the read
      // goes on, for the next dialog and the submit nodes).
      new Promise<never>((_resolve, reject) => {
        timer = setTimeout(() => reject(tooLate), DIALOG_DEFINITIONS.waitMs);
      }),
    ]);
  } catch (error) {
    if (error === tooLate) throw error;
    throw definitionsFailure(error, host, connection.credential, (text) =>
      connection.http.cleanForReport(text),
    );
  } finally {
    clearTimeout(timer);
  }
}

/** An object_info answer read once, with the caller's limits; failures become a ServiceError with a sentence. */
export async function readNodeDefinitions(source: DefinitionsSource): Promise<NodeDefinitions> {
  const { http, host, credential } = dialogClient(source);
  try {
    const rest = new GenerationRestClient(http, undefined, source.maxBytes ?? DEFAULT_MAX_BYTES);
    return await rest.nodeDefinitions();
  } catch (error) {
    throw definitionsFailure(error, host, credential, (text) => http.cleanForReport(text));
  } finally {
    await http.close();
  }
}

/** The editor's view of object_info: per node type its title and its value inputs (links are wired, not set). */
export function editorDefinitionsOf(definitions: NodeDefinitions): Record<string, EditorDefinition> {
  const result: Record<string, EditorDefinition> = {};
  for (const [classType, definition] of Object.entries(definitions)) {
    setOwn(result, classType, {
      title: displayNameOf(definition, classType),
      inputs: inputSpecsOf(definition).filter((spec) => spec.widget),
    });
  }
  return result;
}

interface Entry {
  definitions: NodeDefinitions;
  readAt: number;
  /** Drops the entry once it is too old to be answered: no megabytes kept for a dialog long closed. */
  expiry: NodeJS.Timeout;
}

/**
 * Definitions per config node, address and key (the key only as a hash: a changed key is another entry, and
 * no key is held here), for settings typed in a dialog. An entry is answered for `ttlMs` and then dropped; a
 * refresh reads it again only when it is at least `refreshLimitMs` old; at most `maxEntries` servers are
 * kept, the least recently used making room. Dialogs that ask at once share one read. Left out, the times
 * are DIALOG_DEFINITIONS' at the moment of asking.
 */
export class DefinitionsCache {
  private readonly entries = new Map<string, Entry>();
  private readonly reading = new Map<string, Promise<Entry>>();

  constructor(
    private readonly read: (source: DefinitionsSource) => Promise<NodeDefinitions> = readNodeDefinitions,
    private readonly ttlMs?: number,
    private readonly maxEntries = 8,
    private readonly refreshLimitMs?: number,
  ) {}

  /** How many servers' definitions are held. */
  get size(): number {
    return this.entries.size;
  }

  private keyOf(source: DefinitionsSource): string {
    // Other credentials, TLS settings or proxy are another entry: a read with one set is not answered to another.
    const keyHash = createHash('sha256')
      .update(JSON.stringify([source.apiKey ?? '', source.auth ?? null, source.transport ?? null]))
      .digest('hex');
    return JSON.stringify([source.configId, source.baseUrl.trim(), keyHash]);
  }

  private forget(key: string): void {
    const entry = this.entries.get(key);
    if (!entry) return;
    clearTimeout(entry.expiry);
    this.entries.delete(key);
  }

  /** The definitions of a source: cached ones unless stale or a `refresh` that may read; a failed read is not kept. */
  async get(source: DefinitionsSource, refresh = false): Promise<NodeDefinitions> {
    const key = this.keyOf(source);
    const cached = this.entries.get(key);
    const ttlMs = this.ttlMs ?? DIALOG_DEFINITIONS.maxAgeMs;
    const keepFor = refresh ? (this.refreshLimitMs ?? DIALOG_DEFINITIONS.refreshLimitMs) : ttlMs;
    if (cached && Date.now() - cached.readAt < Math.min(keepFor, ttlMs)) {
      this.entries.delete(key);
      this.entries.set(key, cached);
      return cached.definitions;
    }
    let pending = this.reading.get(key);
    if (!pending) {
      pending = this.read(source)
        .then((definitions) => {
          this.forget(key);
          const expiry = setTimeout(() => {
            if (this.entries.get(key) === entry) this.entries.delete(key);
          }, ttlMs);
          expiry.unref();
          const entry: Entry = { definitions, readAt: Date.now(), expiry };
          this.entries.set(key, entry);
          while (this.entries.size > this.maxEntries) this.forget(this.entries.keys().next().value as string);
          return entry;
        })
        .finally(() => this.reading.delete(key));
      this.reading.set(key, pending);
    }
    return (await pending).definitions;
  }

  /** Forgets everything (the runtime is stopping). */
  clear(): void {
    for (const key of [...this.entries.keys()]) this.forget(key);
  }
}
