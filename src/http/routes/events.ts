import type { HttpBindings } from '@hono/node-server';
import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import type { Context } from 'hono';
import type { JobRow } from '../../db/database.js';
import { ServiceError } from '../../errors.js';
import type { AppEnv } from '../env.js';
import { apiKeySecurity as security, commonErrorResponses, problemResponseSpec } from '../error-responses.js';
import { ITEM_EVENT, JOB_EVENT, type JobEventStreams } from '../job-events.js';
import type { KeyAdmission } from '../key-admission.js';
import { admitted } from '../middleware/admitted.js';
import { validationError } from '../problem.js';
import { keyIdentity } from '../rate-limit.js';
import { JobIdParam } from '../schemas.js';

/**
 * The job event streams' two routes, one implementation (src/http/job-events.ts): getJobEvents
 * carries one job, getEvents any number of them up to MAX_JOBS_PER_EVENT_STREAM, so that a client
 * following many jobs (the web page) holds one connection, not one per job: a browser opens at
 * most six HTTP/1.1 connections to a host, and everything else it asks of the service waits for
 * a free one.
 */

/**
 * The most jobs one getEvents stream carries: the web page's remembered jobs (web/app.js), and a
 * request line (200 ids of 36 characters) that fits nginx's default 8 KiB header buffer.
 */
export const MAX_JOBS_PER_EVENT_STREAM = 200;

const lastEventIdHeader = z.object({
  'last-event-id': z
    .string()
    .max(200)
    .optional()
    .openapi({ description: 'The `id` of the last event received, to resume from.' }),
});

const streamAnswer = {
  description: 'The event stream.',
  content: {
    'text/event-stream': {
      schema: z.string().openapi({
        example:
          'retry: 1000\n\nid: 0xH1FRz6Xb1ysz5LR2QCaA\nevent: job\ndata: {"job_id":"c5b2b0d4-…","status":"running",…}\n\n',
      }),
    },
  },
};

const tooManyStreams = problemResponseSpec(
  'Too many requests (`rate_limited`), or too many event streams open for this key or on this node (`too_many_event_streams`, with `limit`: `per_key` or `per_node`); see Retry-After.',
);

/** What both routes say of a collection's item events (src/http/job-events.ts). */
const ITEM_EVENTS_DESCRIPTION = [
  `A collection's record is sent at each change of its counts; and, for each of its entries whose child job ends while the`,
  `stream is open, an \`${ITEM_EVENT}\` event whose \`data\` is the item as listJobItems shows it (index, title, URL, the child's`,
  'final record: its content id or error), one per entry (two entries of the same URL: two events for their one child), after',
  "the collection's record that counts that child, with that record's `id`. Children that had ended when the stream opened are",
  'told by the counts only: listJobItems has every item. Item events are never dropped while the stream is open: past what',
  'the stream queues unread they wait, and are sent as the client reads.',
].join(' ');

export const getJobEventsRoute = createRoute({
  operationId: 'getJobEvents',
  method: 'get',
  path: '/jobs/{id}/events',
  summary: "The job's record as Server-Sent Events, each time its status or progress changes, until it ends.",
  description: [
    `A \`text/event-stream\`: one \`${JOB_EVENT}\` event per change, whose \`data\` is the job record (the same JSON as getJob) and whose`,
    '`id` names that state; the first event is the current state, the last one the final state (done, failed or canceled),',
    'after which the stream ends. Comment lines (`: keep-alive`) keep an idle stream open. Reconnecting with `Last-Event-ID`',
    'sends the current state only if it differs from that one; 204 when that was the final state already.',
    'Answers the same on every node, whichever node runs the job. getEvents follows many jobs in one stream.',
    ITEM_EVENTS_DESCRIPTION,
  ].join(' '),
  security,
  request: { params: JobIdParam, headers: lastEventIdHeader },
  responses: {
    200: streamAnswer,
    204: {
      description:
        'The client has the final state already (its Last-Event-ID is the last event): nothing more will come.',
    },
    404: problemResponseSpec('No such job.'),
    ...commonErrorResponses,
    429: tooManyStreams,
  },
});

export const getEventsRoute = createRoute({
  operationId: 'getEvents',
  method: 'get',
  path: '/events',
  summary:
    'The records of many jobs as one stream of Server-Sent Events, each time one of them changes, until all have ended.',
  description: [
    `The stream of getJobEvents for up to ${MAX_JOBS_PER_EVENT_STREAM} jobs at once, on one connection: the same \`${JOB_EVENT}\` events,`,
    "each the whole record of one job (its `job_id` says which) with the same `id` as that job's own stream would give it.",
    'First the state of each job now, in the order named; a job that has ended sends its final state and nothing more;',
    'then every change of the others, until the last of them has ended, when the stream ends. Counts as one stream against',
    "the limits per key and per node. Reconnecting with `Last-Event-ID` sends every job's current state but that one",
    '(a client loses nothing but repeats): name only the jobs not yet ended. 204 when there is nothing to send:',
    'every job has ended and the one state left is the Last-Event-ID.',
    ITEM_EVENTS_DESCRIPTION,
  ].join(' '),
  security,
  request: {
    query: z.object({
      jobs: z.string().openapi({
        description: `The job ids, separated by commas (\`,\` or \`%2C\`): 1 to ${MAX_JOBS_PER_EVENT_STREAM}, each named once or more (carried once).`,
        example: 'c5b2b0d4-2f5e-4c43-9a3e-5f2d1b8f2a11,0b7e6f0e-6d55-4a43-b4d4-3c1b9d1f0e22',
      }),
    }),
    headers: lastEventIdHeader,
  },
  responses: {
    200: streamAnswer,
    204: {
      description:
        'Nothing to send: every job named has ended, and the only state left is the one Last-Event-ID names.',
    },
    400: problemResponseSpec(
      `\`validation_failed\` (no \`jobs\`, an empty or over-long id), or \`too_many_jobs\` (more than ${MAX_JOBS_PER_EVENT_STREAM} ids: \`max_jobs\` says how many a stream takes; open another stream for the rest).`,
    ),
    404: problemResponseSpec(
      '`job_not_found`: some of the ids name no job; `job_ids` lists them. Nothing is streamed: name only jobs that exist.',
    ),
    ...commonErrorResponses,
    429: tooManyStreams,
  },
});

/** The ids of getEvents' `jobs` parameter, each once, in the order named; 400 unless 1 to the most a stream takes, each well formed. */
export function jobIdsOf(jobs: string): string[] {
  const named = jobs.split(',');
  if (named.length > MAX_JOBS_PER_EVENT_STREAM) {
    throw new ServiceError(
      'invalid_input',
      'too_many_jobs',
      `One event stream carries at most ${MAX_JOBS_PER_EVENT_STREAM} jobs; this request names ${named.length}. Open another stream for the rest.`,
      { fields: { max_jobs: MAX_JOBS_PER_EVENT_STREAM } },
    );
  }
  const ids: string[] = [];
  for (const [index, id] of named.entries()) {
    const checked = JobIdParam.shape.id.safeParse(id);
    if (!checked.success) {
      throw validationError({
        issues: checked.error.issues.map((issue) => ({ ...issue, path: ['jobs', index] })),
      });
    }
    ids.push(id);
  }
  return [...new Set(ids)];
}

export interface EventRoutesDeps {
  admission: KeyAdmission;
  /** The job's row; throws job_not_found. */
  get: (id: string) => Promise<JobRow>;
  /** The rows of those of `ids` that exist. */
  getMany: (ids: string[]) => Promise<JobRow[]>;
  events: JobEventStreams;
}

/**
 * getJobEvents and getEvents: the API's only routes that are not operations (src/http/operation.ts),
 * because their answer is no Answer but a stream, written as its jobs change for as long as they
 * run and ended with its exchange; the app answers them (@hono/node-server pipes the web stream),
 * node's router passes them on. Admitted (key, rate limit) ahead of their validation, as operations are.
 */
export function registerEventRoutes(app: OpenAPIHono<AppEnv>, deps: EventRoutesDeps): void {
  const middleware = admitted(deps.admission);
  app.openapi({ ...getJobEventsRoute, middleware }, async (c) => {
    const job = await deps.get(c.req.valid('param').id);
    c.get('facts').jobId = job.id;
    return answerStream(c, deps, [job], c.req.valid('header')['last-event-id'], { job_id: job.id });
  });

  app.openapi({ ...getEventsRoute, middleware }, async (c) => {
    const ids = jobIdsOf(c.req.valid('query').jobs);
    const jobs = await deps.getMany(ids);
    if (jobs.length < ids.length) {
      const found = new Set(jobs.map((job) => job.id));
      const missing = ids.filter((id) => !found.has(id));
      throw new ServiceError(
        'not_found',
        'job_not_found',
        `${missing.length} of the ${ids.length} jobs named do not exist (job_ids lists them); name only jobs that exist.`,
        { fields: { job_ids: missing } },
      );
    }
    // In the order named.
    const byId = new Map(jobs.map((job) => [job.id, job]));
    return answerStream(
      c,
      deps,
      ids.map((id) => byId.get(id)!),
      c.req.valid('header')['last-event-id'],
      { jobs: ids.length },
    );
  });
}

/** The stream of `jobs` for this request, or only its head for HEAD; its end is logged with `logged`. */
function answerStream(
  c: Context<AppEnv>,
  deps: EventRoutesDeps,
  jobs: JobRow[],
  lastEventId: string | undefined,
  logged: Record<string, unknown>,
): Promise<Response> {
  const key = deps.admission.validKey({ header: (name) => c.req.header(name) })!;
  const request = { jobs, lastEventId, keyIdentity: keyIdentity(key) };
  // Hono answers HEAD with the GET route's head and drops the body unread: no stream is opened.
  if (c.req.method === 'HEAD') return deps.events.head(request);
  const log = c.get('facts').log;
  return deps.events.open({
    ...request,
    closed: exchangeClosed(c.env as Partial<HttpBindings> | undefined),
    onEnd: (reason) => log.debug({ ...logged, reason }, 'job event stream ended'),
  });
}

/**
 * Aborted when node's response for this request closes: its answer was sent whole, or its
 * connection went away first. Undefined when the app is asked directly (unit tests' app.request).
 */
function exchangeClosed(env: Partial<HttpBindings> | undefined): AbortSignal | undefined {
  const outgoing = env?.outgoing;
  if (!outgoing) return undefined;
  const closed = new AbortController();
  if (outgoing.closed) closed.abort();
  else outgoing.once('close', () => closed.abort());
  return closed.signal;
}
