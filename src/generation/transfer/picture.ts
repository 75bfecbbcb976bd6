/**
 * A small picture of an output file for the editor: which image format a file is (by its first bytes, not
 * its name or Content-Type), and a PNG scaled down to fit a small box. PNG is what the service saves, and
 * node:zlib is all a PNG needs, so the package takes on no image library (nor a native one) for this; a
 * JPEG, GIF or WebP is shown as it is when it is small enough, and refused when it is not. No Node-RED inside.
 */
import { createInflate, crc32, deflate } from 'node:zlib';
import { promisify } from 'node:util';
import { MIB } from './size-text';

export type ImageType = 'image/png' | 'image/jpeg' | 'image/gif' | 'image/webp';

/** What the editor is sent: the bytes of a PNG, JPEG, GIF or WebP, with its size in pixels when known. */
export interface Picture {
  type: ImageType;
  bytes: Buffer;
  width?: number;
  height?: number;
}

/** Why an image is not shown: larger than the limits below, or a PNG this decoder cannot read. */
export type PictureRefusal = 'too-large' | 'unreadable';

export type PictureOutcome = { picture: Picture } | { refused: PictureRefusal };

/** A scaled picture fits this box (pixels); the editor draws every picture at most this large. */
export const PICTURE_BOX = 160;
/** A file up to this size is sent as it is (the editor scales it); a larger PNG is scaled, any other refused. */
export const MAX_SENT_BYTES = 256 * 1024;
/** The largest file looked at at all: a larger one is refused without being read. */
export const MAX_SOURCE_BYTES = 32 * MIB;
/** The most pixels a PNG may have to be scaled (8192 x 4882): bounds the CPU one picture takes. */
export const MAX_PIXELS = 40_000_000;

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

/** The image format of a file by its first bytes, or undefined for anything that is not one of the four. */
export function imageTypeOf(bytes: Buffer): ImageType | undefined {
  if (bytes.length >= 8 && bytes.subarray(0, 8).equals(PNG_SIGNATURE)) return 'image/png';
  if (bytes.length >= 3 && bytes[0] === 0xff && bytes[1] === 0xd8 && bytes[2] === 0xff) return 'image/jpeg';
  if (bytes.length >= 6 && /^GIF8[79]a$/.test(bytes.toString('latin1', 0, 6))) return 'image/gif';
  if (
    bytes.length >= 12 &&
    bytes.toString('latin1', 0, 4) === 'RIFF' &&
    bytes.toString('latin1', 8, 12) === 'WEBP'
  )
    return 'image/webp';
  return undefined;
}

/**
 * The picture of an image file for the editor, or why there is none; undefined when the bytes are not an
 * image at all. Small files go as they are; a larger PNG is scaled to fit PICTURE_BOX; anything else too
 * large is refused. Stops (undefined) when `signal` aborts.
 */
export async function pictureOf(bytes: Buffer, signal?: AbortSignal): Promise<PictureOutcome | undefined> {
  const type = imageTypeOf(bytes);
  if (!type) return undefined;
  if (bytes.length > MAX_SOURCE_BYTES) return { refused: 'too-large' };
  let png: PngParts | undefined;
  if (type === 'image/png') {
    try {
      png = readPng(bytes);
    } catch {
      return { refused: 'unreadable' };
    }
    // Checked even for a small file: a few bytes can say a billion pixels, which the browser would decode.
    if (png.header.width * png.header.height > MAX_PIXELS) return { refused: 'too-large' };
  }
  if (bytes.length <= MAX_SENT_BYTES) {
    return { picture: { type, bytes, width: png?.header.width, height: png?.header.height } };
  }
  if (!png) return { refused: 'too-large' };
  try {
    const scaled = await scalePng(png, signal);
    return scaled && { picture: scaled };
  } catch {
    return signal?.aborted ? undefined : { refused: 'unreadable' };
  }
}

interface PngHeader {
  width: number;
  height: number;
  bitDepth: number;
  colourType: number;
}

interface PngParts {
  header: PngHeader;
  palette?: Buffer;
  transparency?: Buffer;
  data: Buffer[];
}

/** Bit depths each PNG colour type allows (PNG spec, table 11.1), and its samples per pixel. */
const COLOUR_TYPES: Record<number, { depths: number[]; channels: number }> = {
  0: { depths: [1, 2, 4, 8, 16], channels: 1 },
  2: { depths: [8, 16], channels: 3 },
  3: { depths: [1, 2, 4, 8], channels: 1 },
  4: { depths: [8, 16], channels: 2 },
  6: { depths: [8, 16], channels: 4 },
};

/** The chunks of a PNG a picture needs; throws on anything it cannot read (interlaced images included). */
function readPng(bytes: Buffer): PngParts {
  let header: PngHeader | undefined;
  const parts: Omit<PngParts, 'header'> = { data: [] };
  let offset = PNG_SIGNATURE.length;
  while (offset + 12 <= bytes.length) {
    const length = bytes.readUInt32BE(offset);
    const type = bytes.toString('latin1', offset + 4, offset + 8);
    const start = offset + 8;
    const end = start + length;
    if (end + 4 > bytes.length) throw new Error('truncated chunk');
    const chunk = bytes.subarray(start, end);
    if (type === 'IHDR') {
      if (length !== 13) throw new Error('bad header');
      header = {
        width: chunk.readUInt32BE(0),
        height: chunk.readUInt32BE(4),
        bitDepth: chunk[8],
        colourType: chunk[9],
      };
      const kind = COLOUR_TYPES[header.colourType];
      if (!kind || !kind.depths.includes(header.bitDepth)) throw new Error('unknown colour type');
      if (header.width === 0 || header.height === 0) throw new Error('empty image');
      // Compression and filter method 0 are the only ones PNG defines; Adam7 interlacing is not read here.
      if (chunk[10] !== 0 || chunk[11] !== 0 || chunk[12] !== 0)
        throw new Error('interlaced or unknown method');
    } else if (type === 'PLTE') parts.palette = chunk;
    else if (type === 'tRNS') parts.transparency = chunk;
    else if (type === 'IDAT') parts.data.push(chunk);
    else if (type === 'IEND') break;
    offset = end + 4;
  }
  if (!header || parts.data.length === 0) throw new Error('no image data');
  if (header.colourType === 3 && !parts.palette) throw new Error('no palette');
  return { header, ...parts };
}

/** One row's pixels as RGBA, 8 bits each, from its unfiltered bytes. */
function rowToRgba(row: Uint8Array, png: PngParts, rgba: Uint8Array): void {
  const { width, bitDepth, colourType } = png.header;
  const channels = COLOUR_TYPES[colourType].channels;
  if (bitDepth < 8) {
    const mask = (1 << bitDepth) - 1;
    const palette = png.palette;
    const alpha = png.transparency;
    for (let x = 0; x < width; x++) {
      const bit = x * bitDepth;
      const value = (row[bit >> 3] >> (8 - bitDepth - (bit & 7))) & mask;
      const at = x * 4;
      if (colourType === 3 && palette) {
        rgba[at] = palette[value * 3] ?? 0;
        rgba[at + 1] = palette[value * 3 + 1] ?? 0;
        rgba[at + 2] = palette[value * 3 + 2] ?? 0;
        rgba[at + 3] = alpha && value < alpha.length ? alpha[value] : 255;
      } else {
        const grey = Math.round((value * 255) / mask);
        rgba[at] = rgba[at + 1] = rgba[at + 2] = grey;
        rgba[at + 3] = 255;
      }
    }
    return;
  }
  // 16-bit samples keep their high byte: the picture is 8 bits per channel.
  const step = bitDepth / 8;
  for (let x = 0; x < width; x++) {
    const at = x * 4;
    const from = x * channels * step;
    if (colourType === 6) {
      rgba[at] = row[from];
      rgba[at + 1] = row[from + step];
      rgba[at + 2] = row[from + 2 * step];
      rgba[at + 3] = row[from + 3 * step];
    } else if (colourType === 2) {
      rgba[at] = row[from];
      rgba[at + 1] = row[from + step];
      rgba[at + 2] = row[from + 2 * step];
      rgba[at + 3] = 255;
    } else if (colourType === 3) {
      const index = row[from];
      const palette = png.palette as Buffer;
      rgba[at] = palette[index * 3] ?? 0;
      rgba[at + 1] = palette[index * 3 + 1] ?? 0;
      rgba[at + 2] = palette[index * 3 + 2] ?? 0;
      rgba[at + 3] = png.transparency && index < png.transparency.length ? png.transparency[index] : 255;
    } else {
      rgba[at] = rgba[at + 1] = rgba[at + 2] = row[from];
      rgba[at + 3] = colourType === 4 ? row[from + step] : 255;
    }
  }
}

/** Undoes one row's PNG filter in place (PNG spec, section 9), `previous` being the row above. */
function unfilter(kind: number, row: Uint8Array, previous: Uint8Array, bpp: number): void {
  const length = row.length;
  switch (kind) {
    case 0:
      return;
    case 1:
      for (let i = bpp; i < length; i++) row[i] = (row[i] + row[i - bpp]) & 0xff;
      return;
    case 2:
      for (let i = 0; i < length; i++) row[i] = (row[i] + previous[i]) & 0xff;
      return;
    case 3:
      for (let i = 0; i < length; i++) {
        const left = i >= bpp ? row[i - bpp] : 0;
        row[i] = (row[i] + ((left + previous[i]) >> 1)) & 0xff;
      }
      return;
    case 4:
      for (let i = 0; i < length; i++) {
        const a = i >= bpp ? row[i - bpp] : 0;
        const b = previous[i];
        const c = i >= bpp ? previous[i - bpp] : 0;
        const p = a + b - c;
        const pa = Math.abs(p - a);
        const pb = Math.abs(p - b);
        const pc = Math.abs(p - c);
        row[i] = (row[i] + (pa <= pb && pa <= pc ? a : pb <= pc ? b : c)) & 0xff;
      }
      return;
    default:
      throw new Error('unknown filter');
  }
}

/**
 * The PNG scaled to fit PICTURE_BOX, each pixel the average of the source pixels it covers. The image data
 * is inflated as a stream and read row by row: memory stays at two rows whatever the image's size, and the
 * event loop gets a turn between chunks.
 */
async function scalePng(png: PngParts, signal?: AbortSignal): Promise<Picture | undefined> {
  const { width, height, bitDepth, colourType } = png.header;
  const bitsPerPixel = COLOUR_TYPES[colourType].channels * bitDepth;
  const stride = Math.ceil((width * bitsPerPixel) / 8);
  const bpp = Math.max(1, bitsPerPixel >> 3);
  const scale = Math.min(1, PICTURE_BOX / width, PICTURE_BOX / height);
  const targetWidth = Math.max(1, Math.round(width * scale));
  const targetHeight = Math.max(1, Math.round(height * scale));

  const columnOf = new Uint32Array(width);
  for (let x = 0; x < width; x++) columnOf[x] = Math.floor((x * targetWidth) / width);
  const sums = new Float64Array(targetWidth * 4);
  const counts = new Float64Array(targetWidth);
  const target = Buffer.alloc(targetHeight * targetWidth * 4);
  const rgba = new Uint8Array(width * 4);
  // Two rows, each with its filter byte first: the one being read and the one above it.
  let current = new Uint8Array(stride + 1);
  let above = new Uint8Array(stride + 1);
  let filled = 0;
  let y = 0;
  let band = 0;

  const flush = () => {
    for (let x = 0; x < targetWidth; x++) {
      const at = (band * targetWidth + x) * 4;
      for (let c = 0; c < 4; c++) target[at + c] = Math.round(sums[x * 4 + c] / (counts[x] || 1));
    }
    sums.fill(0);
    counts.fill(0);
  };
  const takeRow = () => {
    const pixels = current.subarray(1);
    unfilter(current[0], pixels, above.subarray(1), bpp);
    rowToRgba(pixels, png, rgba);
    const rowBand = Math.floor((y * targetHeight) / height);
    if (rowBand !== band) {
      flush();
      band = rowBand;
    }
    for (let x = 0; x < width; x++) {
      const column = columnOf[x];
      const from = x * 4;
      const to = column * 4;
      sums[to] += rgba[from];
      sums[to + 1] += rgba[from + 1];
      sums[to + 2] += rgba[from + 2];
      sums[to + 3] += rgba[from + 3];
      counts[column] += 1;
    }
    // The row just read is the one above the next: swapped, not copied.
    [current, above] = [above, current];
    filled = 0;
    y += 1;
  };

  const inflater = createInflate();
  const onAbort = () => inflater.destroy();
  signal?.addEventListener('abort', onAbort);
  try {
    // Written as the stream takes them: the compressed data is at most MAX_SOURCE_BYTES.
    for (const part of png.data) inflater.write(part);
    inflater.end();
    for await (const chunk of inflater as AsyncIterable<Buffer>) {
      let at = 0;
      while (at < chunk.length && y < height) {
        const take = Math.min(chunk.length - at, current.length - filled);
        current.set(chunk.subarray(at, at + take), filled);
        filled += take;
        at += take;
        if (filled === current.length) takeRow();
      }
      // Data past the last row is ignored (and not inflated further).
      if (y === height) break;
    }
  } finally {
    signal?.removeEventListener('abort', onAbort);
    inflater.destroy();
  }
  if (signal?.aborted) return undefined;
  if (y < height) throw new Error('image data ends early');
  flush();
  return {
    type: 'image/png',
    bytes: await encodePng(targetWidth, targetHeight, target),
    width: targetWidth,
    height: targetHeight,
  };
}

const deflateAsync = promisify(deflate);

function pngChunk(type: string, data: Buffer): Buffer {
  const head = Buffer.alloc(8);
  head.writeUInt32BE(data.length, 0);
  head.write(type, 4, 'latin1');
  const check = Buffer.alloc(4);
  check.writeUInt32BE(crc32(Buffer.concat([head.subarray(4), data])) >>> 0, 0);
  return Buffer.concat([head, data, check]);
}

/** An 8-bit PNG of RGBA pixels; RGB when every pixel is opaque (a quarter fewer bytes). */
async function encodePng(width: number, height: number, rgba: Buffer): Promise<Buffer> {
  let opaque = true;
  for (let i = 3; i < rgba.length && opaque; i += 4) opaque = rgba[i] === 255;
  const channels = opaque ? 3 : 4;
  const rows = Buffer.alloc(height * (1 + width * channels));
  let to = 0;
  for (let y = 0; y < height; y++) {
    rows[to++] = 0;
    for (let x = 0; x < width; x++) {
      const from = (y * width + x) * 4;
      rows[to++] = rgba[from];
      rows[to++] = rgba[from + 1];
      rows[to++] = rgba[from + 2];
      if (!opaque) rows[to++] = rgba[from + 3];
    }
  }
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header[8] = 8;
  header[9] = opaque ? 2 : 6;
  return Buffer.concat([
    PNG_SIGNATURE,
    pngChunk('IHDR', header),
    pngChunk('IDAT', await deflateAsync(rows, { level: 9 })),
    pngChunk('IEND', Buffer.alloc(0)),
  ]);
}
