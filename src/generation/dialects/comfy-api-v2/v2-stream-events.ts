/**
 * A v2 job's event stream (`GET /api/v2/jobs/{id}/events`), read and told in today's words. Two steps, each one
 * function: `readV2StreamEvent` is the boundary (an SSE event's type and JSON data, as sse-reader.ts hands them,
 * become a typed `V2StreamEvent`, or "could not read" with a reason), and `translateV2Event` says what such an
 * event is to a job's life (job-life.ts): the `SocketEvent`s of today's API it acts on, and whether the event
 * was the job's end. Read from the real proxy (../shared/peers/comfy-v2/README.md, "Event stream"): a `status`
 * snapshot on connect, live `progress` and `preview` (throttled 0.5 s, dropped not coalesced), the final
 * `status`, then the job's `output` items; no `id:`, no resume.
 *
 * The translation
 * | v2 event                                        | SocketEvents                                         |
 * |-------------------------------------------------|------------------------------------------------------|
 * | status running                                  | execution_start (the first of the job only: a new    |
 * |                                                 | stream's snapshot says it again)                     |
 * | status queued, canceling, another word          | none (the book's queue reads place a waiting job)    |
 * | status succeeded, failed, canceled, expired     | none; `final`: the book is asked now, and reads the  |
 * |                                                 | end, outputs and error over REST                     |
 * | progress with step and steps                    | progress {value: step, max: steps, node:             |
 * |                                                 | current_node, prompt_id}                             |
 * | progress without them                           | progress_state {value, nodes_done, nodes_total,      |
 * |                                                 | current_node, prompt_id}: v2's own numbers (value is |
 * |                                                 | the job's fraction done), not ComfyUI's `nodes` map; |
 * |                                                 | the life only passes it on to progress msgs          |
 * | any progress before the job was seen to start   | execution_start first (a stream opened while queued  |
 * |                                                 | gets no `status running`)                            |
 * | preview {node_id, content_type, data_base64}    | preview, its frame a type-4 BinaryFrame (the decoded |
 * |                                                 | image, metadata {node_id, prompt_id, image_type})    |
 * | output item                                     | executed {node: node_id, output: {<kind key>: [file |
 * |                                                 | with asset_id]}, prompt_id} (v2-outputs.ts)          |
 * | an output that cannot be read                   | unreadable_frame: the life never takes its outputs   |
 * |                                                 | as whole from its events                             |
 * | log, any other event, anything unreadable       | none                                                 |
 * No `execution_success` / `execution_error` is ever made: a v2 job's end, its outputs and its error always come
 * from REST, so no stream can end a job wrongly. No Node-RED inside.
 */
import { readV2OutputItem } from './v2-answers';
import {
  ownValue,
  readJsonText,
  readOk,
  setOwn,
  textOf,
  unreadable,
  type Read,
} from '../../../boundary/outside';
import { isRecord, shownValue } from '../../../boundary/json-values';
import { SecretSearch, removeSecrets } from '../../../http/errors';
import { BinaryType, sniffImageType, type BinaryFrame, type ImageType } from '../../jobs/frames';
import { UNREADABLE_EVENT } from '../../jobs/frame-reader';
import type { SocketEvent } from '../../jobs/socket-manager';
import { outputKeyOf, fileOfOutput, type V2OutputItem } from './v2-outputs';

/** The status words that end a v2 job (the spec's enum; `canceling` is not one yet). */
const FINAL_STATUSES = new Set(['succeeded', 'failed', 'canceled', 'expired']);

/** Bounds on the words of an event. */
const MAX_WORD = 100;
const MAX_NODE_ID = 200;
/** Base64's alphabet, padded or not: anything else is no image. */
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

export type V2StreamEvent =
  | { kind: 'status'; status: string }
  | {
      kind: 'progress';
      value?: number;
      nodesDone?: number;
      nodesTotal?: number;
      currentNode?: string;
      /** Both or neither: the running node's own progress bar. */
      step?: { value: number; max: number };
    }
  | { kind: 'preview'; nodeId?: string; contentType?: string; imageType: ImageType; image: Buffer }
  | { kind: 'output'; item: V2OutputItem }
  /** `log` (reserved, never sent) or an event this package does not know. */
  | { kind: 'other'; type: string };

/**
 * One SSE event of a v2 stream as a typed value, or why it cannot be read. `secrets` are removed from the data
 * when it may hold one (a server that echoes the token). Never throws.
 */
export function readV2StreamEvent(
  type: string,
  dataText: string,
  secrets: SecretSearch,
  secretList: ReadonlyArray<string>,
): Read<V2StreamEvent> {
  if (type !== 'status' && type !== 'progress' && type !== 'preview' && type !== 'output')
    return readOk({ kind: 'other', type: type.slice(0, MAX_WORD) });
  const parsed = readJsonText(dataText);
  if (!parsed.ok) return unreadable(`its data cannot be read: ${parsed.reason}`);
  if (!isRecord(parsed.value)) return unreadable(`its data is not an object (${shownValue(parsed.value)})`);
  const data = secrets.mayBeInJson(dataText) ? removeSecrets(parsed.value, secretList) : parsed.value;
  switch (type) {
    case 'status':
      return readStatus(data);
    case 'progress':
      return readOk(readProgress(data));
    case 'preview':
      return readPreview(data);
    default: {
      const item = readV2OutputItem(data);
      return item.ok ? readOk({ kind: 'output', item: item.value }) : item;
    }
  }
}

function readStatus(data: Record<string, unknown>): Read<V2StreamEvent> {
  const status = ownValue(data, 'status');
  if (typeof status !== 'string' || status.length > MAX_WORD)
    return unreadable(`a status that is no status word (${shownValue(status)})`);
  return readOk({ kind: 'status', status });
}

/** A progress event's numbers, each kept only when it is one (a missing or odd field is not guessed). */
function readProgress(data: Record<string, unknown>): V2StreamEvent {
  const event: Extract<V2StreamEvent, { kind: 'progress' }> = { kind: 'progress' };
  const value = finite(ownValue(data, 'value'));
  if (value !== undefined) event.value = value;
  const nodesDone = finite(ownValue(data, 'nodes_done'));
  if (nodesDone !== undefined) event.nodesDone = nodesDone;
  const nodesTotal = finite(ownValue(data, 'nodes_total'));
  if (nodesTotal !== undefined) event.nodesTotal = nodesTotal;
  const currentNode = nodeIdOf(ownValue(data, 'current_node'));
  if (currentNode !== undefined) event.currentNode = currentNode;
  const step = finite(ownValue(data, 'step'));
  const steps = finite(ownValue(data, 'steps'));
  if (step !== undefined && steps !== undefined) event.step = { value: step, max: steps };
  return event;
}

function readPreview(data: Record<string, unknown>): Read<V2StreamEvent> {
  const encoded = ownValue(data, 'data_base64');
  if (typeof encoded !== 'string' || encoded.length === 0 || encoded.length % 4 === 1)
    return unreadable('a preview without its image as base64');
  if (!BASE64.test(encoded)) return unreadable('a preview whose image is not base64');
  const image = Buffer.from(encoded, 'base64');
  const contentType = textOf(ownValue(data, 'content_type'), MAX_WORD);
  const imageType = imageTypeOf(contentType) ?? sniffImageType(image);
  if (imageType === undefined) return unreadable('a preview that is neither a PNG nor a JPEG image');
  const event: Extract<V2StreamEvent, { kind: 'preview' }> = { kind: 'preview', imageType, image };
  const nodeId = nodeIdOf(ownValue(data, 'node_id'));
  if (nodeId !== undefined && nodeId !== '') event.nodeId = nodeId;
  if (contentType !== undefined) event.contentType = contentType;
  return readOk(event);
}

/** What one v2 event is to a job's life. */
export interface Translation {
  events: SocketEvent[];
  /** A final status: the job ended (the book reads how over REST). */
  final: boolean;
}

/** What the translation remembers of a job across its streams. */
export interface TranslationState {
  /** An execution_start was given for it. */
  started: boolean;
}

/**
 * The SocketEvents of one v2 event of job `promptId` (see the table above), on connection `epoch`; `bytes` is
 * the event's size on the wire (a made-up execution_start before a progress carries 0).
 */
export function translateV2Event(
  event: V2StreamEvent,
  promptId: string,
  state: TranslationState,
  epoch: number,
  bytes: number,
): Translation {
  const events: SocketEvent[] = [];
  const start = (startBytes: number) => {
    if (state.started) return;
    state.started = true;
    events.push({ type: 'execution_start', data: { prompt_id: promptId }, epoch, bytes: startBytes });
  };
  switch (event.kind) {
    case 'status':
      if (FINAL_STATUSES.has(event.status)) return { events, final: true };
      if (event.status === 'running') start(bytes);
      break;
    case 'progress': {
      start(0);
      if (event.step) {
        const data: Record<string, unknown> = {
          value: event.step.value,
          max: event.step.max,
          prompt_id: promptId,
        };
        if (event.currentNode !== undefined) data.node = event.currentNode;
        events.push({ type: 'progress', data, epoch, bytes });
      } else {
        const data: Record<string, unknown> = { prompt_id: promptId };
        if (event.value !== undefined) data.value = event.value;
        if (event.nodesDone !== undefined) data.nodes_done = event.nodesDone;
        if (event.nodesTotal !== undefined) data.nodes_total = event.nodesTotal;
        if (event.currentNode !== undefined) data.current_node = event.currentNode;
        events.push({ type: 'progress_state', data, epoch, bytes });
      }
      break;
    }
    case 'preview': {
      const metadata: Record<string, unknown> = { prompt_id: promptId, image_type: event.imageType };
      if (event.nodeId !== undefined) metadata.node_id = event.nodeId;
      const frame: BinaryFrame = {
        type: BinaryType.PREVIEW_IMAGE_WITH_METADATA,
        imageType: event.imageType,
        image: event.image,
        metadata,
      };
      events.push({ type: 'preview', data: metadata, frame, epoch, bytes });
      break;
    }
    case 'output': {
      const { item } = event;
      // The key is the server's kind word when this package does not know it (maybe `__proto__`).
      const output: Record<string, unknown> = {};
      setOwn(output, outputKeyOf(item.type), [fileOfOutput(item)]);
      events.push({
        type: 'executed',
        data: { node: item.node_id, display_node: item.node_id, output, prompt_id: promptId },
        epoch,
        bytes,
      });
      break;
    }
    default:
      break;
  }
  return { events, final: false };
}

/** The event a job is given for an `output` that could not be read: it lost an event. */
export function lostOutputEvent(promptId: string, epoch: number, bytes: number): SocketEvent {
  return { type: UNREADABLE_EVENT, data: { prompt_id: promptId }, epoch, bytes };
}

function finite(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) ? value : undefined;
}

/** A node id: text or a number (ComfyUI's ids are digits), bounded; undefined for anything else. */
function nodeIdOf(value: unknown): string | undefined {
  if (typeof value !== 'string' && typeof value !== 'number') return undefined;
  const text = textOf(value);
  return text !== undefined && text.length <= MAX_NODE_ID ? text : undefined;
}

/** An image type from a content type: `image/png`, `image/jpeg` (other words for them too). */
function imageTypeOf(contentType: string | undefined): ImageType | undefined {
  if (contentType === undefined) return undefined;
  if (/png/i.test(contentType)) return 'png';
  if (/jpe?g/i.test(contentType)) return 'jpeg';
  return undefined;
}
