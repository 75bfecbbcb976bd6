/**
 * The node definitions the editor's dialogs show (the submit dialog's form, its dropdowns and the check of
 * values the server does not offer): read from a server's `GET /api/object_info`, kept for a while per
 * config node, address and key, and answered as sentences when they cannot be had. No Node-RED inside.
 */
import { createHash } from 'node:crypto';
import { HttpClient } from '../../http/client';
import { ServiceError } from '../../http/errors';
import { displayNameOf, inputSpecsOf, type InputSpec } from './node-definitions';
import { GenerationRestClient } from '../transfer/rest-client';
import type { NodeTypeDefinition } from './workflow';

export type NodeDefinitions = Record<string, NodeTypeDefinition>;

/** Where to read definitions from: the settings of one config node (as deployed, or as typed in its dialog). */
export interface DefinitionsSource {
  /** The config node's id ('' for one that has none yet). */
  configId: string;
  baseUrl: string;
  apiKey?: string;
  /** The largest answer read (object_info of a server with many custom nodes runs to megabytes). */
  maxBytes?: number;
}

/** What the editor needs of one node type: its name to show and its value inputs, in the graph editor's order. */
export interface EditorDefinition {
  title: string;
  inputs: InputSpec[];
}

const DEFAULT_MAX_BYTES = 64 * 1024 * 1024;
/** A dialog waits this long at most: a server that does not answer gets a sentence, not a hung form. */
const READ_TIMEOUT_MS = 30_000;

/** The sentence a dialog shows when the definitions cannot be read, by error code. */
function sentenceFor(error: ServiceError, host: string, hasKey: boolean): string {
  switch (error.code) {
    case 'unauthorized':
      return hasKey
        ? `${host} refused the API key, so its node definitions cannot be shown: check the key in the config node.`
        : `${host} asks for an API key, so its node definitions cannot be shown: enter one in the config node.`;
    case 'network':
      return `${host} could not be reached, so its node definitions cannot be shown: check the address and that the service is running.`;
    case 'invalid_input':
      return error.message;
    default:
      return `${host} did not give its node definitions (${error.message}).`;
  }
}

/** An object_info answer read once, with the caller's limits; failures become a ServiceError with a sentence. */
export async function readNodeDefinitions(source: DefinitionsSource): Promise<NodeDefinitions> {
  let address: URL;
  try {
    address = new URL(source.baseUrl.trim());
    if (address.protocol !== 'http:' && address.protocol !== 'https:') throw new Error('not http');
  } catch {
    throw new ServiceError(
      'invalid_input',
      'The base address is not an http(s) address, e.g. https://gen.example.com: set it in the config node.',
    );
  }
  const http = new HttpClient({
    baseUrl: address.href,
    headers: source.apiKey ? { 'x-api-key': source.apiKey } : {},
    secrets: [source.apiKey],
    serviceName: 'the generation service',
    // A person is waiting at the dialog: one quick retry at most, then the sentence.
    retry: { attempts: 2, baseDelayMs: 200, maxDelayMs: 500 },
    timeoutMs: READ_TIMEOUT_MS,
    totalTimeoutMs: READ_TIMEOUT_MS,
  });
  try {
    const rest = new GenerationRestClient(http, undefined, source.maxBytes ?? DEFAULT_MAX_BYTES);
    return await rest.nodeDefinitions();
  } catch (error) {
    const serviceError =
      error instanceof ServiceError ? error : new ServiceError('network', http.cleanForReport(String(error)));
    throw new ServiceError(serviceError.code, sentenceFor(serviceError, address.host, !!source.apiKey));
  } finally {
    await http.close();
  }
}

/** The editor's view of object_info: per node type its title and its value inputs (links are wired, not set). */
export function editorDefinitionsOf(definitions: NodeDefinitions): Record<string, EditorDefinition> {
  const result: Record<string, EditorDefinition> = {};
  for (const [classType, definition] of Object.entries(definitions)) {
    result[classType] = {
      title: displayNameOf(definition, classType),
      inputs: inputSpecsOf(definition).filter((spec) => spec.widget),
    };
  }
  return result;
}

interface Entry {
  definitions: NodeDefinitions;
  readAt: number;
}

/**
 * Definitions per config node, address and key (the key only as a hash: a changed key is another entry, and
 * no key is held here), kept for `ttlMs` or until a refresh; at most `maxEntries` servers are kept, the
 * least recently used making room. Dialogs that ask at once share one read.
 */
export class DefinitionsCache {
  private readonly entries = new Map<string, Entry>();
  private readonly reading = new Map<string, Promise<Entry>>();

  constructor(
    private readonly read: (source: DefinitionsSource) => Promise<NodeDefinitions> = readNodeDefinitions,
    private readonly ttlMs = 10 * 60_000,
    private readonly maxEntries = 8,
  ) {}

  private keyOf(source: DefinitionsSource): string {
    const keyHash = createHash('sha256')
      .update(source.apiKey ?? '')
      .digest('hex');
    return JSON.stringify([source.configId, source.baseUrl.trim(), keyHash]);
  }

  /** The definitions of a source: cached ones unless stale or `refresh`; a failed read is not kept. */
  async get(source: DefinitionsSource, refresh = false): Promise<NodeDefinitions> {
    const key = this.keyOf(source);
    const cached = this.entries.get(key);
    if (cached && !refresh && Date.now() - cached.readAt < this.ttlMs) {
      this.entries.delete(key);
      this.entries.set(key, cached);
      return cached.definitions;
    }
    let pending = this.reading.get(key);
    if (!pending) {
      pending = this.read(source)
        .then((definitions) => {
          const entry = { definitions, readAt: Date.now() };
          this.entries.delete(key);
          this.entries.set(key, entry);
          while (this.entries.size > this.maxEntries) {
            this.entries.delete(this.entries.keys().next().value as string);
          }
          return entry;
        })
        .finally(() => this.reading.delete(key));
      this.reading.set(key, pending);
    }
    return (await pending).definitions;
  }

  /** Forgets everything (the runtime is stopping). */
  clear(): void {
    this.entries.clear();
  }
}
