/**
 * Asking the service where a job stands, on whichever route it has: `/api/job/{id}/status` (the spec),
 * else `/api/jobs/{id}`, else `/api/history/{id}` (self-hosted servers). Words are mapped by status-words.
 */
import type { HttpClient } from '../http/client';
import { phaseOfStatus, type JobPhase } from './status-words';

export interface ExecutionError {
  exception_type: string;
  exception_message: string;
  traceback: string[];
}

export interface StatusAnswer {
  phase: JobPhase;
  /** The word the service used, for messages. */
  word?: string;
  error?: ExecutionError;
}

/** The error fields of an `execution_error` event (or of a body that carries one). */
export function executionError(data: unknown): ExecutionError {
  const record = (data && typeof data === 'object' ? data : {}) as Record<string, unknown>;
  const traceback = record.traceback;
  return {
    exception_type: typeof record.exception_type === 'string' ? record.exception_type : 'unknown',
    exception_message: typeof record.exception_message === 'string' ? record.exception_message : '',
    traceback: Array.isArray(traceback)
      ? traceback.map(String)
      : typeof traceback === 'string'
        ? [traceback]
        : [],
  };
}

function errorFromBody(body: Record<string, unknown>): ExecutionError | undefined {
  const candidate = body.execution_error ?? body.error;
  if (candidate && typeof candidate === 'object') return executionError(candidate);
  if (typeof candidate === 'string')
    return { exception_type: 'unknown', exception_message: candidate, traceback: [] };
  return undefined;
}

/** A history entry `{status: {status_str, completed, messages}, outputs}`; undefined when not there yet. */
function fromHistory(body: unknown, promptId: string): StatusAnswer | undefined {
  if (!body || typeof body !== 'object') return undefined;
  const entry = (body as Record<string, unknown>)[promptId] as Record<string, unknown> | undefined;
  if (!entry || typeof entry !== 'object') return undefined;
  const status = (entry.status ?? {}) as { status_str?: unknown; messages?: unknown };
  const word = typeof status.status_str === 'string' ? status.status_str : 'completed';
  const answer: StatusAnswer = { phase: phaseOfStatus(word), word };
  if (Array.isArray(status.messages)) {
    for (const message of status.messages) {
      if (Array.isArray(message) && message[0] === 'execution_error')
        answer.error = executionError(message[1]);
      if (Array.isArray(message) && message[0] === 'execution_interrupted') answer.phase = 'cancelled';
    }
  }
  return answer;
}

/** Where the job stands; undefined when no route knows it (yet). Network failures are raised. */
export async function checkJobStatus(http: HttpClient, promptId: string): Promise<StatusAnswer | undefined> {
  const id = encodeURIComponent(promptId);
  const action = 'checking the status of a job';
  const spec = await http.json<{ status?: unknown }>(`/api/job/${id}/status`, {
    acceptStatus: [404, 405],
    action,
  });
  if (spec.status < 300 && spec.body && typeof spec.body === 'object' && 'status' in spec.body) {
    const word = String(spec.body.status);
    return { phase: phaseOfStatus(word), word };
  }
  const jobs = await http.json<Record<string, unknown>>(`/api/jobs/${id}`, {
    acceptStatus: [404, 405],
    action,
  });
  if (jobs.status < 300 && jobs.body && typeof jobs.body === 'object' && 'status' in jobs.body) {
    const word = String(jobs.body.status);
    const answer: StatusAnswer = { phase: phaseOfStatus(word), word };
    const error = errorFromBody(jobs.body);
    if (error && answer.phase === 'failed') answer.error = error;
    return answer;
  }
  const history = await http.json<unknown>(`/api/history/${id}`, { acceptStatus: [404, 405], action });
  if (history.status < 300) return fromHistory(history.body, promptId);
  return undefined;
}

/** The execution error of a failed job, where `/api/jobs/{id}` tells it; undefined otherwise. */
export async function fetchExecutionError(
  http: HttpClient,
  promptId: string,
): Promise<ExecutionError | undefined> {
  try {
    const { status, body } = await http.json<Record<string, unknown>>(
      `/api/jobs/${encodeURIComponent(promptId)}`,
      {
        acceptStatus: [404, 405],
        action: 'reading the error of a job',
      },
    );
    return status < 300 && body && typeof body === 'object' ? errorFromBody(body) : undefined;
  } catch {
    return undefined;
  }
}
