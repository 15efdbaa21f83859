import { createRoute, type OpenAPIHono } from '@hono/zod-openapi';
import type { JobRow } from '../../db/database.js';
import type { AppEnv } from '../env.js';
import { apiKeySecurity as security, commonErrorResponses, problemResponseSpec } from '../error-responses.js';
import { JobIdParam, JobSchema, type JobRecord } from '../schemas.js';

export const getJobRoute = createRoute({
  operationId: 'getJob',
  method: 'get',
  path: '/jobs/{id}',
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
    200: { description: 'The canceled job (also when it was canceled before).', content: { 'application/json': { schema: JobSchema } } },
    404: problemResponseSpec('No such job.'),
    409: problemResponseSpec('The job is already done or failed.'),
    ...commonErrorResponses,
  },
});

export function registerJobRoutes(
  app: OpenAPIHono<AppEnv>,
  deps: { get: (id: string) => Promise<JobRow>; cancel: (id: string) => Promise<JobRow>; render: (job: JobRow) => Promise<JobRecord> },
): void {
  app.openapi(getJobRoute, async (c) => {
    const job = await deps.get(c.req.valid('param').id);
    c.set('jobId', job.id);
    return c.json(await deps.render(job), 200);
  });
  app.openapi(cancelJobRoute, async (c) => {
    const job = await deps.cancel(c.req.valid('param').id);
    c.set('jobId', job.id);
    c.get('log').info({ job_id: job.id }, 'job canceled');
    return c.json(await deps.render(job), 200);
  });
}
