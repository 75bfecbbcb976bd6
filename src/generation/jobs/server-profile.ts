/**
 * What the server is, read once per connection: `GET /api/system_stats`'s `system.comfyui_version`. From the
 * version follow the routes to use; a server that names no version (a cloud service, another server of the
 * protocol) is judged by the routes it lacks. A route the version promises but the server answers without (a
 * downgrade while Node-RED ran) is remembered as missing. No Node-RED inside.
 *
 * | ComfyUI  | what changes for a client (measured on v0.8.0 and v0.33.0, read in their source)               |
 * |----------|--------------------------------------------------------------------------------------------------|
 * | 0.8      | `GET /api/jobs?status=...` lists active jobs; `POST /api/interrupt {prompt_id}` is targeted      |
 * | 0.9      | an interrupted or cancelled job reads `cancelled` (before: `failed` with `execution_interrupted`) |
 * | 0.25     | a client-chosen `prompt_id` must be a lower-case UUID (always sent as one here)                  |
 * | 0.26     | `POST /api/jobs/{id}/cancel` dequeues a pending job or interrupts a running one, in one call     |
 */
import type { HttpClient } from '../../http/client';

export interface ServerProfile {
  /** `system.comfyui_version`, e.g. "0.33.0"; undefined when the server names none. */
  comfyuiVersion?: string;
}

/** A failed read is not remembered longer than this: the next use asks again. */
const RETRY_AFTER_FAILURE_MS = 30_000;

/** [major, minor, patch] of "0.33.0", "v0.8.0" or "0.3.75-rc1"; undefined for anything else. */
export function versionOf(text: string | undefined): [number, number, number] | undefined {
  const match = /^v?(\d+)\.(\d+)(?:\.(\d+))?/.exec(text?.trim() ?? '');
  return match ? [Number(match[1]), Number(match[2]), Number(match[3] ?? 0)] : undefined;
}

/** Whether the profile names a ComfyUI of at least this version. */
export function atLeast(profile: ServerProfile | undefined, minimum: [number, number, number]): boolean {
  const version = versionOf(profile?.comfyuiVersion);
  if (!version) return false;
  for (let part = 0; part < 3; part++) {
    if (version[part] !== minimum[part]) return version[part] > minimum[part];
  }
  return true;
}

export class ServerKnowledge {
  private reading?: Promise<ServerProfile>;
  private failedAt = 0;
  private known?: ServerProfile;
  private cancelRouteMissing = false;

  constructor(private readonly http: HttpClient) {}

  /** The profile, read on first use; a read that failed is tried again on a use 30 s later. */
  async profile(signal?: AbortSignal): Promise<ServerProfile> {
    if (this.known) return this.known;
    if (!this.reading && Date.now() - this.failedAt < RETRY_AFTER_FAILURE_MS) return {};
    this.reading ??= this.read(signal).finally(() => (this.reading = undefined));
    return this.reading;
  }

  /** `POST /api/jobs/{id}/cancel` where the server has it (ComfyUI 0.26 and later). */
  async hasCancelRoute(signal?: AbortSignal): Promise<boolean> {
    return !this.cancelRouteMissing && atLeast(await this.profile(signal), [0, 26, 0]);
  }

  /** The server answered the cancel route as one that lacks it. */
  noCancelRoute(): void {
    this.cancelRouteMissing = true;
  }

  /** A targeted interrupt interrupts only the job it names (ComfyUI 0.8 and later at least). */
  async targetedInterrupts(signal?: AbortSignal): Promise<boolean> {
    return atLeast(await this.profile(signal), [0, 8, 0]);
  }

  private async read(signal?: AbortSignal): Promise<ServerProfile> {
    try {
      const answer = await this.http.json<unknown>('/api/system_stats', {
        acceptStatus: [404, 405],
        signal,
        action: 'reading what the server is',
      });
      const system = (answer.body as { system?: { comfyui_version?: unknown } } | undefined)?.system;
      const version = system?.comfyui_version;
      this.known =
        answer.status < 300 && typeof version === 'string' ? { comfyuiVersion: version.slice(0, 40) } : {};
      return this.known;
    } catch (error) {
      if (signal?.aborted) throw error;
      this.failedAt = Date.now();
      return {};
    }
  }
}
