'use strict';
// A tiny PNG encoder for images the tests upload or decode: 8-bit RGBA by default, or any colour type, bit
// depth and row filter (encodePngRows, for the picture tests' format matrix). No image library needed.
const zlib = require('node:zlib');

const SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

function chunk(type, data) {
  const length = Buffer.alloc(4);
  length.writeUInt32BE(data.length);
  const body = Buffer.concat([Buffer.from(type, 'latin1'), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(zlib.crc32(body) >>> 0);
  return Buffer.concat([length, body, crc]);
}

/** The PNG filter predictors (PNG spec, section 9): `raw` byte i, with `left`, `up`, `upLeft`. */
function filtered(kind, row, above, bpp) {
  const out = Buffer.alloc(row.length);
  for (let i = 0; i < row.length; i++) {
    const a = i >= bpp ? row[i - bpp] : 0;
    const b = above[i];
    const c = i >= bpp ? above[i - bpp] : 0;
    let predictor = 0;
    if (kind === 1) predictor = a;
    else if (kind === 2) predictor = b;
    else if (kind === 3) predictor = (a + b) >> 1;
    else if (kind === 4) {
      const p = a + b - c;
      const pa = Math.abs(p - a);
      const pb = Math.abs(p - b);
      const pc = Math.abs(p - c);
      predictor = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
    }
    out[i] = (row[i] - predictor) & 0xff;
  }
  return out;
}

const CHANNELS = { 0: 1, 2: 3, 3: 1, 4: 2, 6: 4 };

/**
 * A PNG from packed rows (`rows[y]`, a Buffer of that row's samples, no filter byte), each row filtered
 * with `filter` (0-4, or a function of y); PLTE and tRNS when given; `interlace` only writes the header flag.
 */
function encodePngRows({
  width,
  height,
  colourType = 6,
  bitDepth = 8,
  rows,
  filter = 0,
  palette,
  transparency,
  interlace = 0,
}) {
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header.set([bitDepth, colourType, 0, 0, interlace], 8);
  const bpp = Math.max(1, (CHANNELS[colourType] * bitDepth) >> 3);
  const parts = [];
  let above = Buffer.alloc(rows[0].length);
  for (let y = 0; y < height; y++) {
    const kind = typeof filter === 'function' ? filter(y) : filter;
    parts.push(Buffer.from([kind]), filtered(kind, rows[y], above, bpp));
    above = rows[y];
  }
  return Buffer.concat([
    SIGNATURE,
    chunk('IHDR', header),
    ...(palette ? [chunk('PLTE', palette)] : []),
    ...(transparency ? [chunk('tRNS', transparency)] : []),
    chunk('IDAT', zlib.deflateSync(Buffer.concat(parts))),
    chunk('IEND', Buffer.alloc(0)),
  ]);
}

/** A `width` x `height` PNG whose pixel (x, y) is `pixel(x, y)` = [r, g, b, a], each 0-255. */
function encodePng(width, height, pixel) {
  const rows = [];
  for (let y = 0; y < height; y++) {
    const row = Buffer.alloc(width * 4);
    for (let x = 0; x < width; x++) row.set(pixel(x, y), x * 4);
    rows.push(row);
  }
  return encodePngRows({ width, height, rows });
}

module.exports = { encodePng, encodePngRows, SIGNATURE };
