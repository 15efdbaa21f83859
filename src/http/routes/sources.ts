import { createRoute, type OpenAPIHono } from '@hono/zod-openapi';
import type { JobRow } from '../../db/database.js';
import type { AppEnv } from '../env.js';
import { apiKeySecurity, commonErrorResponses, problemResponseSpec } from '../error-responses.js';
import { jsonBody } from '../middleware/json-body.js';
import { JobSchema, SubmitSourceBody, type JobRecord } from '../schemas.js';

export const MAX_BODY_BYTES = 8 * 1024;

export const submitSourceRoute = createRoute({
  operationId: 'submitSource',
  method: 'post',
  path: '/sources',
  summary: 'Fetch the best audio of a URL as a 44.1 kHz WAV, asynchronously.',
  security: apiKeySecurity,
  middleware: [jsonBody({ maxBytes: MAX_BODY_BYTES })] as const,
  request: { body: { content: { 'application/json': { schema: SubmitSourceBody } }, required: true } },
  responses: {
    202: {
      description: 'Accepted: the job record. Poll Location. A URL already stored gives a job that is born done.',
      headers: { Location: { schema: { type: 'string' }, description: '/jobs/{id}' } },
      content: { 'application/json': { schema: JobSchema } },
    },
    400: problemResponseSpec('Malformed body or URL.'),
    413: problemResponseSpec('Body larger than 8 KiB.'),
    415: problemResponseSpec('Body is not JSON.'),
    422: problemResponseSpec("The URL's destination is refused by the address policy."),
    ...commonErrorResponses,
  },
});

export function registerSourceRoutes(
  app: OpenAPIHono<AppEnv>,
  deps: { submit: (url: string, requestId: string) => Promise<JobRow>; render: (job: JobRow) => Promise<JobRecord> },
): void {
  app.openapi(submitSourceRoute, async (c) => {
    const { url } = c.req.valid('json');
    const job = await deps.submit(url, c.get('requestId'));
    c.set('jobId', job.id);
    c.get('log').info({ job_id: job.id, status: job.status, born_done: job.bornDone }, 'source submitted');
    c.header('Location', `/jobs/${job.id}`);
    return c.json(await deps.render(job), 202);
  });
}
