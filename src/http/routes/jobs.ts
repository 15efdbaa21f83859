import type { HttpBindings } from '@hono/node-server';
import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import type { JobRow } from '../../db/database.js';
import type { KeyAdmission } from '../key-admission.js';
import type { AppEnv } from '../env.js';
import { apiKeySecurity as security, commonErrorResponses, problemResponseSpec } from '../error-responses.js';
import { JOB_EVENT, type JobEventStreams } from '../job-events.js';
import { admitted } from '../middleware/admitted.js';
import { jsonAnswer, type ApiRequest, type OperationBinding } from '../operation.js';
import { validationError } from '../problem.js';
import { keyIdentity } from '../rate-limit.js';
import { honoPath, JOB_ROUTE } from '../route-template.js';
import { JobIdParam, JobSchema, type JobRecord } from '../schemas.js';

export const getJobRoute = createRoute({
  operationId: 'getJob',
  method: 'get',
  path: JOB_ROUTE,
  summary: 'The job record: status, progress, and the result or the error.',
  security,
  request: { params: JobIdParam },
  responses: {
    200: { description: 'The job.', content: { 'application/json': { schema: JobSchema } } },
    404: problemResponseSpec('No such job.'),
    ...commonErrorResponses,
  },
});

export const cancelJobRoute = createRoute({
  operationId: 'cancelJob',
  method: 'post',
  path: '/jobs/{id}/cancel',
  summary: 'Cancel a queued or running job; its tools are killed and nothing is stored.',
  security,
  request: { params: JobIdParam },
  responses: {
    200: {
      description: 'The canceled job (also when it was canceled before).',
      content: { 'application/json': { schema: JobSchema } },
    },
    404: problemResponseSpec('No such job.'),
    409: problemResponseSpec('The job is already done or failed.'),
    ...commonErrorResponses,
  },
});

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
    'Answers the same on every node, whichever node runs the job.',
  ].join(' '),
  security,
  request: {
    params: JobIdParam,
    headers: z.object({
      'last-event-id': z
        .string()
        .max(200)
        .optional()
        .openapi({ description: 'The `id` of the last event received, to resume from.' }),
    }),
  },
  responses: {
    200: {
      description: 'The event stream.',
      content: {
        'text/event-stream': {
          schema: z.string().openapi({
            example:
              'retry: 1000\n\nid: 0xH1FRz6Xb1ysz5LR2QCaA\nevent: job\ndata: {"job_id":"c5b2b0d4-…","status":"running",…}\n\n',
          }),
        },
      },
    },
    204: {
      description:
        'The client has the final state already (its Last-Event-ID is the last event): nothing more will come.',
    },
    404: problemResponseSpec('No such job.'),
    ...commonErrorResponses,
    429: problemResponseSpec(
      'Too many requests (`rate_limited`), or too many event streams open for this key or on this node (`too_many_event_streams`, with `limit`: `per_key` or `per_node`); see Retry-After.',
    ),
  },
});

/** The job id of a request's path: 400 validation_failed unless it is one. */
function jobIdOf(request: ApiRequest): string {
  const result = JobIdParam.safeParse(request.params);
  if (!result.success) throw validationError(result.error);
  return result.data.id;
}

/** getJob and cancelJob. */
export function jobOperations(deps: {
  admission: KeyAdmission;
  /** The job's record, read in one go; throws not_found. */
  read: (id: string) => Promise<JobRecord>;
  cancel: (id: string) => Promise<JobRow>;
  render: (job: JobRow) => Promise<JobRecord>;
}): OperationBinding[] {
  // Clients poll a job until it ends: a record shared by the polls of one second (createJobRenderer: frozen) is serialized once.
  const bodies = new WeakMap<JobRecord, string>();
  return [
    {
      method: 'GET',
      path: honoPath(JOB_ROUTE),
      operation: {
        route: JOB_ROUTE,
        async answer(request) {
          deps.admission.admit(request);
          const record = await deps.read(jobIdOf(request));
          request.facts.jobId = record.job_id;
          let body = bodies.get(record);
          if (body === undefined) {
            body = JSON.stringify(record);
            if (Object.isFrozen(record)) bodies.set(record, body);
          }
          return jsonAnswer(200, body);
        },
      },
    },
    {
      method: 'POST',
      path: honoPath(cancelJobRoute.path),
      operation: {
        route: cancelJobRoute.path,
        async answer(request) {
          deps.admission.admit(request);
          const job = await deps.cancel(jobIdOf(request));
          request.facts.jobId = job.id;
          request.facts.log.info({ job_id: job.id }, 'job canceled');
          return jsonAnswer(200, JSON.stringify(await deps.render(job)));
        },
      },
    },
  ];
}

/** getJobEvents: a stream, answered by the app alone. */
export function registerJobEventsRoute(
  app: OpenAPIHono<AppEnv>,
  deps: { admission: KeyAdmission; get: (id: string) => Promise<JobRow>; events: JobEventStreams },
): void {
  app.use(honoPath(getJobEventsRoute.path), admitted(deps.admission));
  app.openapi(getJobEventsRoute, async (c) => {
    const job = await deps.get(c.req.valid('param').id);
    c.get('facts').jobId = job.id;
    const key = deps.admission.validKey({ header: (name) => c.req.header(name) })!;
    const log = c.get('facts').log;
    const request = { job, lastEventId: c.req.valid('header')['last-event-id'], keyIdentity: keyIdentity(key) };
    // Hono answers HEAD with the GET route's head and drops the body unread: no stream is opened.
    if (c.req.method === 'HEAD') return deps.events.head(request);
    return deps.events.open({
      ...request,
      closed: exchangeClosed(c.env as Partial<HttpBindings> | undefined),
      onEnd: (reason) => log.debug({ job_id: job.id, reason }, 'job event stream ended'),
    });
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
