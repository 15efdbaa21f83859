import { createRoute } from '@hono/zod-openapi';
import type { JobRow } from '../../db/database.js';
import type { KeyAdmission } from '../key-admission.js';
import { apiKeySecurity as security, commonErrorResponses, problemResponseSpec } from '../error-responses.js';
import { bindOperation, jsonAnswer, type ApiRequest, type OperationBinding } from '../operation.js';
import { validationError } from '../problem.js';
import { JOB_ROUTE } from '../route-template.js';
import { collectionItemRecord } from '../job-record.js';
import {
  CollectionItemsSchema,
  ItemsQuery,
  JobIdParam,
  JobSchema,
  type CollectionItemsRecord,
  type JobRecord,
} from '../schemas.js';
import type { ItemView, JobView } from '../../jobs/job-service.js';

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

export const listJobItemsRoute = createRoute({
  operationId: 'listJobItems',
  method: 'get',
  path: '/jobs/{id}/items',
  summary: "A collection's entries, in playlist order: each accepted with its child job, or refused with its problem.",
  description:
    'Pages of at most 100 items (`limit`, default 50), after the index `after`; a page that is full gives `next_after` for the next. Entries appear as the collection lists them.',
  security,
  request: { params: JobIdParam, query: ItemsQuery },
  responses: {
    200: { description: 'A page of items.', content: { 'application/json': { schema: CollectionItemsSchema } } },
    400: problemResponseSpec('`after` or `limit` is not a number in range.'),
    404: problemResponseSpec('No such job (job_not_found), or it is not a collection (job_not_collection).'),
    ...commonErrorResponses,
  },
});

/** The job id of a request's path: 400 validation_failed unless it is one. */
function jobIdOf(request: ApiRequest): string {
  const result = JobIdParam.safeParse(request.params);
  if (!result.success) throw validationError(result.error);
  return result.data.id;
}

/** getJob, cancelJob and listJobItems. */
export function jobOperations(deps: {
  admission: KeyAdmission;
  /** The job's record, read in one go; throws not_found. */
  read: (id: string) => Promise<JobRecord>;
  cancel: (id: string) => Promise<JobRow>;
  render: (job: JobRow) => Promise<JobRecord>;
  items: (
    id: string,
    page: { after: number; limit: number },
  ) => Promise<{ items: ItemView[]; nextAfter: number | null }>;
  renderView: (view: JobView) => JobRecord;
}): OperationBinding[] {
  // Clients poll a job until it ends: a record shared by the polls of one second (createJobRenderer: frozen) is serialized once.
  const bodies = new WeakMap<JobRecord, string>();
  return [
    bindOperation(getJobRoute, {
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
    }),
    bindOperation(cancelJobRoute, {
      async answer(request) {
        deps.admission.admit(request);
        const job = await deps.cancel(jobIdOf(request));
        request.facts.jobId = job.id;
        request.facts.log.info({ job_id: job.id }, 'job canceled');
        return jsonAnswer(200, JSON.stringify(await deps.render(job)));
      },
    }),
    bindOperation(listJobItemsRoute, {
      async answer(request) {
        deps.admission.admit(request);
        const id = jobIdOf(request);
        const query = ItemsQuery.safeParse({ after: request.query('after'), limit: request.query('limit') });
        if (!query.success) throw validationError(query.error);
        request.facts.jobId = id;
        const page = await deps.items(id, query.data);
        const body: CollectionItemsRecord = {
          items: page.items.map((item) => collectionItemRecord(item, deps.renderView)),
          next_after: page.nextAfter,
        };
        return jsonAnswer(200, JSON.stringify(body));
      },
    }),
  ];
}
