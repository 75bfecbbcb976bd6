/**
 * The v2 mode's output ids (v2-assets.ts serves the files they name, v2-jobs.ts lists them in a job's outputs):
 * stateless and signed, as the proxy mints them, so a job's outputs are downloadable by id without a table of
 * them. Apart from both because both use it and neither uses the other for it. No Node-RED inside.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { readJsonText, textOf } from '../boundary/outside';
import { isRecord } from '../boundary/json-values';
import type { FileRef } from './generation-jobs';
import { pyJson } from './v2-wire';

/**
 * Output ids as the proxy mints them: base64url of Python's JSON `{"j", "f", "s", "t"}`, a dot, base64url of
 * its HMAC-SHA256 under a secret of this sandbox. Stateless: an output stays downloadable by its id after the
 * engine forgot its job, while the file is there.
 */
export class OutputIds {
  private readonly secret = randomBytes(32);

  mint(jobId: string, ref: FileRef): string {
    const payload = Buffer.from(
      pyJson({ j: jobId, f: ref.filename, s: ref.subfolder, t: ref.type }),
      'utf8',
    ).toString('base64url');
    return `${payload}.${this.tag(payload).toString('base64url')}`;
  }

  /** The file an id names, or undefined for anything this sandbox did not mint. */
  read(id: string): (FileRef & { jobId?: string }) | undefined {
    const dot = id.indexOf('.');
    if (dot < 0) return undefined;
    const payload = id.slice(0, dot);
    const given = Buffer.from(id.slice(dot + 1), 'base64url');
    const expected = this.tag(payload);
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return undefined;
    const read = readJsonText(Buffer.from(payload, 'base64url').toString('utf8'));
    if (!read.ok || !isRecord(read.value)) return undefined;
    const filename = textOf(read.value.f);
    const subfolder = textOf(read.value.s);
    const type = textOf(read.value.t);
    if (filename === undefined || subfolder === undefined || type === undefined) return undefined;
    return { filename, subfolder, type, jobId: textOf(read.value.j) };
  }

  private tag(payload: string): Buffer {
    return createHmac('sha256', this.secret).update(payload).digest();
  }
}
