'use strict';
// The v2 event stream's readers against any split and any bytes: the SSE reader (sse-reader.ts) reads a valid
// stream to the same events however it is cut into chunks (mid-line, between CR and LF, inside a UTF-8
// character); on hostile bytes it never throws and agrees with a plain whole-text model, past its bounds too
// (the stream ends unreadable, nothing is buffered past them); and the v2 event reader (v2-stream-events.ts)
// makes typed events or a reason of any JSON, never a throw.
const assert = require('node:assert/strict');
const { fc, fuzzOptions, hostileJson, deepJson, PROTOTYPE_WORDS } = require('../support/fuzz');
const { SseReader, readSse } = require('../../dist/generation/dialects/comfy-api-v2/sse-reader');
const {
  readV2StreamEvent,
  translateV2Event,
} = require('../../dist/generation/dialects/comfy-api-v2/v2-stream-events');
const { SecretSearch } = require('../../dist/http/errors');

const SECRET = 'v2-fuzz-token-9c1d';

/** Reads `chunks` with a fresh reader: the events, and whether (why) it stopped as unreadable. */
function readChunks(chunks, maxEventBytes) {
  const events = [];
  const reader = new SseReader((event) => events.push(event), { maxEventBytes });
  let refused;
  for (const chunk of chunks) {
    if (!reader.push(chunk)) {
      refused = reader.refusal;
      break;
    }
  }
  return { events, refused };
}

/** `bytes` cut at `cuts` (byte offsets, any order, repeats allowed). */
function split(bytes, cuts) {
  const points = [...new Set(cuts.map((cut) => cut % (bytes.length + 1)))].sort((a, b) => a - b);
  const chunks = [];
  let start = 0;
  for (const point of points) {
    chunks.push(bytes.subarray(start, point));
    start = point;
  }
  chunks.push(bytes.subarray(start));
  return chunks;
}

/**
 * The whole-text model of the reader: lines cut by CRLF, CR or LF on the bytes, each decoded whole; the same
 * fields and bounds. Written for clarity, not speed: what the incremental reader must agree with.
 */
function model(bytes, max) {
  const text = Buffer.from(bytes).toString('latin1');
  const events = [];
  let type = '';
  let data = [];
  let dataBytes = 0;
  let first = true;
  const ends = /\r\n|\r|\n/g;
  let position = 0;
  for (let match = ends.exec(text); match; match = ends.exec(text)) {
    const raw = text.slice(position, match.index);
    position = ends.lastIndex;
    if (raw.length > max) return { events, refused: true };
    let line = Buffer.from(raw, 'latin1').toString('utf8');
    if (first) {
      first = false;
      if (line.startsWith('\uFEFF')) line = line.slice(1);
    }
    if (line === '') {
      if (data.length > 0) events.push({ type: type || 'message', data: data.join('\n') });
      type = '';
      data = [];
      dataBytes = 0;
      continue;
    }
    if (line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') {
      dataBytes += raw.length + 1;
      if (dataBytes > max) return { events, refused: true };
      data.push(value);
    } else if (field === 'event') type = value;
  }
  return { events, refused: text.length - position > max };
}

const lineText = fc.string({ unit: 'grapheme', maxLength: 24 }).map((text) => text.replace(/[\r\n]/g, ''));
const eol = fc.constantFrom('\n', '\r\n', '\r');
/** One event as a server may write it: a type or none, data lines, and other fields and comments among them. */
const eventParts = fc.record({
  type: fc.oneof(
    fc.constant(''),
    fc.constantFrom('status', 'progress', 'preview', 'output', 'log'),
    lineText,
  ),
  data: fc.array(lineText, { minLength: 1, maxLength: 4 }),
  extras: fc.array(
    fc.oneof(
      lineText.map((text) => `:${text}`),
      fc.constantFrom('id: 7', 'retry: 100', 'x-field: y', 'nocolon', ': keepalive'),
    ),
    { maxLength: 3 },
  ),
  keepalive: fc.boolean(),
});

/** A valid stream: its lines (each with its end) and the events it must give. */
const validStream = fc
  .record({
    bom: fc.boolean(),
    events: fc.array(eventParts, { minLength: 1, maxLength: 8 }),
    ends: fc.array(eol, { minLength: 64, maxLength: 64 }),
  })
  .map(({ bom, events, ends }) => {
    const lines = [];
    const expected = [];
    for (const { type, data, extras, keepalive } of events) {
      if (keepalive) lines.push(': keepalive', '');
      if (type !== '') lines.push(`event: ${type}`);
      lines.push(...extras);
      for (const value of data) lines.push(`data: ${value}`);
      lines.push('');
      expected.push({ type: type || 'message', data: data.join('\n') });
    }
    let text = bom ? '\uFEFF' : '';
    let previous = '';
    lines.forEach((line, index) => {
      // A CR then an empty line ended by LF would be one CRLF: a writer never means that, so none is made.
      let end = ends[index % ends.length];
      if (previous === '\r' && line === '' && end !== '\r') end = '\r';
      text += line + end;
      previous = end;
    });
    return { bytes: Buffer.from(text, 'utf8'), expected };
  });

describe('fuzz: the SSE reader (v2 event streams)', () => {
  it('reads any split of a valid stream to the same events, with the same sizes', () => {
    fc.assert(
      fc.property(validStream, fc.array(fc.nat(), { maxLength: 40 }), ({ bytes, expected }, cuts) => {
        const whole = readChunks([bytes]);
        const pieces = readChunks(split(bytes, cuts));
        assert.equal(whole.refused, undefined);
        assert.equal(pieces.refused, undefined);
        assert.deepEqual(
          whole.events.map(({ type, data }) => ({ type, data })),
          expected,
        );
        assert.deepEqual(pieces.events, whole.events);
        // Each event's bytes are its own lines: together no more than the stream.
        const total = whole.events.reduce((sum, event) => sum + event.bytes, 0);
        assert.ok(whole.events.every((event) => event.bytes > 0));
        assert.ok(total <= bytes.length, `${total} of ${bytes.length} bytes`);
      }),
      fuzzOptions(300),
    );
  });

  it('reads a stream given one byte at a time, and as strings, alike', async () => {
    const text =
      'event: output\r\ndata: {"name":"bild_ü_€_😀.png"}\r\n\r\n: keepalive\r\rdata: a\rdata: b\r\r';
    const bytes = Buffer.from(text, 'utf8');
    const expected = [
      { type: 'output', data: '{"name":"bild_ü_€_😀.png"}' },
      { type: 'message', data: 'a\nb' },
    ];
    const single = readChunks([...bytes].map((byte) => Uint8Array.of(byte)));
    assert.deepEqual(
      single.events.map(({ type, data }) => ({ type, data })),
      expected,
    );
    const events = [];
    const end = await readSse(
      (async function* () {
        yield text.slice(0, 20);
        yield text.slice(20);
      })(),
      (event) => events.push(event),
    );
    assert.deepEqual(end, { kind: 'ended' });
    assert.deepEqual(events, single.events);
  });

  it('never throws on hostile bytes, and agrees with the whole-text model, bounds included', () => {
    const piece = fc.oneof(
      fc
        .constantFrom(
          'data:',
          'data: ',
          'event:',
          'event: x',
          ':',
          ' ',
          '\r',
          '\n',
          '\r\n',
          'é',
          '\uFEFF',
          'x',
        )
        .map((text) => Buffer.from(text, 'utf8')),
      fc.uint8Array({ maxLength: 8 }).map((array) => Buffer.from(array)),
    );
    const hostile = fc.array(piece, { maxLength: 60 }).map((pieces) => Buffer.concat(pieces));
    fc.assert(
      fc.property(
        hostile,
        fc.array(fc.nat(), { maxLength: 30 }),
        fc.integer({ min: 1, max: 80 }),
        (bytes, cuts, max) => {
          const read = readChunks(split(bytes, cuts), max);
          const expected = model(bytes, max);
          assert.deepEqual(
            read.events.map(({ type, data }) => ({ type, data })),
            expected.events,
          );
          assert.equal(read.refused !== undefined, expected.refused, read.refused);
          for (const event of read.events) {
            assert.equal(typeof event.type, 'string');
            assert.equal(typeof event.data, 'string');
          }
        },
      ),
      fuzzOptions(500),
    );
  });

  it('ends a stream as unreadable past its bounds, and reads nothing after', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 16, max: 4096 }),
        fc.constantFrom('line', 'data'),
        fc.array(fc.nat(), { maxLength: 20 }),
        (max, which, cuts) => {
          const over =
            which === 'line'
              ? `data: ${'x'.repeat(max)}\n\n`
              : `${'data: yy\n'.repeat(Math.ceil(max / 9) + 1)}\n`;
          const bytes = Buffer.from(`data: before\n\n${over}data: after\n\n`);
          const read = readChunks(split(bytes, cuts), max);
          assert.match(read.refused ?? '', which === 'line' ? /a line longer than/ : /bytes of data/);
          assert.deepEqual(
            read.events.map((event) => event.data),
            ['before'],
          );
          const reader = new SseReader(() => assert.fail('an event after the refusal'), {
            maxEventBytes: max,
          });
          assert.equal(reader.push(over), false);
          assert.equal(reader.push('data: after\n\n'), false);
        },
      ),
      fuzzOptions(100),
    );
  });

  it('reads a long line in many chunks in linear time (no re-scan of what it holds)', () => {
    // 4 MB in 1 KB chunks: a reader that joined or re-scanned its buffer per chunk would copy gigabytes.
    const line = Buffer.from(`data: ${'a'.repeat(4 * 1024 * 1024)}\n`);
    const chunks = [];
    for (let offset = 0; offset < line.length; offset += 1024)
      chunks.push(line.subarray(offset, offset + 1024));
    chunks.push(Buffer.from('\n'));
    // And one chunk of 200,000 short lines with no CR at all.
    chunks.push(Buffer.from('data: b\n\n'.repeat(100_000)));
    const started = process.hrtime.bigint();
    const { events, refused } = readChunks(chunks);
    const ms = Number(process.hrtime.bigint() - started) / 1e6;
    assert.equal(refused, undefined);
    assert.equal(events.length, 100_001);
    assert.equal(events[0].data.length, 4 * 1024 * 1024);
    assert.ok(ms < 5_000, `${Math.round(ms)} ms`);
  });
});

describe('fuzz: the v2 event reader', () => {
  const secrets = new SecretSearch([SECRET]);
  const types = fc.constantFrom('status', 'progress', 'preview', 'output', 'log', ...PROTOTYPE_WORDS);

  it('makes a typed event or a reason of any JSON, and translates it without throwing', () => {
    const hostileData = fc.oneof(
      hostileJson(),
      fc.record(
        {
          status: fc.oneof(fc.constantFrom('running', 'succeeded', 'queued'), hostileJson()),
          step: fc.oneof(fc.integer(), hostileJson()),
          steps: fc.oneof(fc.integer(), hostileJson()),
          current_node: hostileJson(),
          node_id: hostileJson(),
          id: fc.oneof(fc.constant(`asset ${SECRET}`), hostileJson()),
          name: hostileJson(),
          type: fc.oneof(fc.constantFrom(...PROTOTYPE_WORDS, 'image'), hostileJson()),
          content_type: hostileJson(),
          data_base64: fc.oneof(fc.constantFrom('/9j/4AAQ', 'iVBORw0KGgo=', '!!!', '', 'a'), hostileJson()),
        },
        { requiredKeys: [] },
      ),
    );
    fc.assert(
      fc.property(types, hostileData, (type, data) => {
        const text = JSON.stringify(data) ?? 'null';
        const read = readV2StreamEvent(type, text, secrets, [SECRET]);
        if (!read.ok) {
          assert.ok(typeof read.reason === 'string' && read.reason.length > 0);
          return;
        }
        const state = { started: false };
        const { events, final } = translateV2Event(read.value, 'job-1', state, 1, text.length);
        assert.equal(typeof final, 'boolean');
        for (const event of events) {
          assert.equal(typeof event.type, 'string');
          assert.equal(event.data.prompt_id, 'job-1');
          assert.equal(event.epoch, 1);
          assert.ok(Number.isInteger(event.bytes));
          if (event.type === 'preview') assert.ok(Buffer.isBuffer(event.frame.image));
          assert.ok(!JSON.stringify(event.data).includes(SECRET), 'a secret passed on');
          assert.equal(Object.getPrototypeOf(event.data), Object.prototype);
        }
      }),
      fuzzOptions(400),
    );
  });

  it('refuses data nested past the bound, and text that is not JSON', () => {
    for (const type of ['status', 'progress', 'preview', 'output']) {
      const deep = readV2StreamEvent(type, deepJson(100_000, '0', 'a'), secrets, [SECRET]);
      assert.equal(deep.ok, false);
      assert.match(deep.reason, /nests deeper/);
      const junk = readV2StreamEvent(type, '{"status": runn', secrets, [SECRET]);
      assert.equal(junk.ok, false);
    }
  });
});
