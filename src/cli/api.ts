import type { components, operations, paths } from '../client/openapi-types.js';
import { createEventStreamReader } from './sse.js';

/**
 * The service's API as the CLI calls it, typed by src/client/openapi-types.ts (generated from
 * openapi.json): a path or a body that the description no longer has fails the type check, so
 * the client cannot drift from the service.
 */
export type Job = components['schemas']['Job'];
export type Problem = components['schemas']['Problem'];
type SubmitBody = operations['submitSource']['requestBody']['content']['application/json'];
type Submitted = operations['submitSource']['responses'][202]['content']['application/json'];
type JobAnswer = operations['getJob']['responses'][200]['content']['application/json'];
type Canceled = operations['cancelJob']['responses'][200]['content']['application/json'];
export type ScrubReport = components['schemas']['ScrubReport'];
export type CollectionItems = components['schemas']['CollectionItems'];
export type CollectionItem = components['schemas']['CollectionItem'];
type PlaylistOption = components['schemas']['PlaylistOption'];
export type WebhookSecrets = components['schemas']['WebhookSecrets'];

/** A path of the description with its parameters filled in (each percent-encoded). */
function pathOf<P extends keyof paths>(template: P, params: Record<string, string> = {}): string {
  return template.replace(/\{(\w+)\}/g, (_, name: string) => encodeURIComponent(params[name] ?? ''));
}

/** The service answered with a problem document (or another error status). */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly problem: Problem | undefined,
    readonly retryAfterS: number | undefined,
  ) {
    super(problem ? `${problem.code}: ${problem.detail}` : `HTTP ${status}`);
    this.name = 'ApiError';
  }
}

/** The service could not be reached, or answered something that is not the API. */
export class TransportError extends Error {
  override name = 'TransportError';
}

export interface ApiClientOptions {
  baseUrl: string;
  apiKey: string;
  fetch?: typeof fetch;
  userAgent?: string;
}

export interface ApiClient {
  /** submitSource; with `playlist`, the URL is a collection (its parent job is answered). */
  submit(url: string, playlist?: PlaylistOption): Promise<Submitted>;
  /** listJobItems: a collection's items after index `after`, at most `limit`. */
  listItems(id: string, after: number, limit: number): Promise<CollectionItems>;
  getJob(id: string): Promise<JobAnswer>;
  cancel(id: string): Promise<Canceled>;
  /**
   * One connection to getJobEvents: calls `onJob` for each event, and resolves when the server
   * ends the stream, with the last event id and the reconnection delay it asked for; 'ended'
   * when it answered 204 (the last id was the final state).
   */
  followEvents(
    id: string,
    lastEventId: string | undefined,
    onJob: (job: Job, eventId: string | undefined) => void,
    signal?: AbortSignal,
  ): Promise<{ lastEventId: string | undefined; retryMs: number | undefined } | 'ended'>;
  /** Fetches a path of the service (an artifact's) with the key. */
  download(path: string, signal?: AbortSignal): Promise<Response>;
  /** scrubStore: starts a scrub pass, or joins the one running; its report once it ends, or as it stands after `waitS`. */
  scrub(waitS: number, signal?: AbortSignal): Promise<ScrubReport>;
  /** getStoreScrub: the node's pass running or last ended, waited for up to `waitS`. */
  scrubReport(waitS: number, signal?: AbortSignal): Promise<ScrubReport>;
  /** getWebhookSecret: the secrets that sign the callbacks of this key's jobs, the current one first. */
  webhookSecrets(): Promise<WebhookSecrets>;
}

export function createApiClient(opts: ApiClientOptions): ApiClient {
  const doFetch = opts.fetch ?? fetch;
  // A base URL with a path (https://host/audio/) keeps it: paths are resolved below it.
  const base = opts.baseUrl.endsWith('/') ? opts.baseUrl : `${opts.baseUrl}/`;
  const urlOf = (path: string) => new URL(path.replace(/^\//, ''), base);

  async function send(path: string, init: RequestInit = {}): Promise<Response> {
    const headers = new Headers(init.headers);
    headers.set('authorization', `Bearer ${opts.apiKey}`);
    if (opts.userAgent) headers.set('user-agent', opts.userAgent);
    let res: Response;
    try {
      res = await doFetch(urlOf(path), { ...init, headers });
    } catch (err) {
      if ((err as Error).name === 'AbortError') throw err;
      const cause = (err as { cause?: { code?: string; message?: string } }).cause;
      throw new TransportError(`cannot reach ${base}: ${cause?.code ?? cause?.message ?? (err as Error).message}`);
    }
    if (res.ok) return res;
    const text = await res.text().catch(() => '');
    let problem: Problem | undefined;
    if ((res.headers.get('content-type') ?? '').includes('json')) {
      try {
        problem = JSON.parse(text) as Problem;
      } catch {
        problem = undefined;
      }
    }
    const retryAfter = Number(res.headers.get('retry-after'));
    throw new ApiError(
      res.status,
      problem?.code ? problem : undefined,
      Number.isFinite(retryAfter) && retryAfter > 0 ? retryAfter : undefined,
    );
  }

  async function json<T>(res: Response): Promise<T> {
    try {
      return (await res.json()) as T;
    } catch {
      throw new TransportError(`the answer from ${base} is not JSON`);
    }
  }

  return {
    async submit(url, playlist) {
      const body: SubmitBody = playlist ? { url, playlist } : { url };
      const res = await send(pathOf('/sources'), {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      return json<Submitted>(res);
    },
    async getJob(id) {
      return json<JobAnswer>(await send(pathOf('/jobs/{id}', { id })));
    },
    async listItems(id, after, limit) {
      return json<CollectionItems>(await send(`${pathOf('/jobs/{id}/items', { id })}?after=${after}&limit=${limit}`));
    },
    async cancel(id) {
      return json<Canceled>(await send(pathOf('/jobs/{id}/cancel', { id }), { method: 'POST' }));
    },
    async followEvents(id, lastEventId, onJob, signal) {
      const headers: Record<string, string> = { accept: 'text/event-stream' };
      if (lastEventId !== undefined) headers['last-event-id'] = lastEventId;
      const res = await send(pathOf('/jobs/{id}/events', { id }), { headers, signal });
      if (res.status === 204) return 'ended';
      if (!(res.headers.get('content-type') ?? '').startsWith('text/event-stream') || !res.body) {
        throw new TransportError(`the answer from ${base} is not an event stream`);
      }
      const reader = createEventStreamReader();
      let last = lastEventId;
      const decoder = new TextDecoder();
      try {
        for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
          for (const event of reader.push(decoder.decode(chunk, { stream: true }))) {
            last = event.id;
            if (event.event !== 'job') continue;
            let job: Job;
            try {
              job = JSON.parse(event.data) as Job;
            } catch {
              throw new TransportError('an event of the stream is not a job record');
            }
            onJob(job, event.id);
          }
        }
      } catch (err) {
        if (err instanceof TransportError || (err as Error).name === 'AbortError') throw err;
        // The connection broke mid-stream: the caller reconnects from the last id.
      }
      return { lastEventId: last, retryMs: reader.retryMs };
    },
    async download(path, signal) {
      return send(path, { signal });
    },
    async scrub(waitS, signal) {
      return json<ScrubReport>(await send(`${pathOf('/store/scrub')}?wait_s=${waitS}`, { method: 'POST', signal }));
    },
    async scrubReport(waitS, signal) {
      return json<ScrubReport>(await send(`${pathOf('/store/scrub')}?wait_s=${waitS}`, { signal }));
    },
    async webhookSecrets() {
      return json<WebhookSecrets>(await send(pathOf('/webhook-secret')));
    },
  };
}
