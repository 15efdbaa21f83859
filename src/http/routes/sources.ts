import { createRoute } from '@hono/zod-openapi';
import type { JobRow } from '../../db/database.js';
import type { BatchItem, JobService, JobView, Submission } from '../../jobs/job-service.js';
import { jobKeyIdentity } from '../../jobs/key-identity.js';
import type { KeyAdmission } from '../key-admission.js';
import { apiKeySecurity, commonErrorResponses, problemResponseSpec } from '../error-responses.js';
import { jsonRequestBody } from '../json-request-body.js';
import { bindOperation, jsonAnswer, type OperationBinding } from '../operation.js';
import { refusalProblem } from '../problem.js';
import { SOURCES_ROUTE } from '../route-template.js';
import {
  BatchResultSchema,
  JobSchema,
  MAX_BATCH_URLS,
  SubmitSourceBatchBody,
  SubmitSourceBody,
  type BatchResult,
  type JobRecord,
} from '../schemas.js';

const MAX_BODY_BYTES = 8 * 1024;
/** Room for MAX_BATCH_URLS URLs of the longest length, and a callback_url. */
const MAX_BATCH_BODY_BYTES = 256 * 1024;

export const submitSourceRoute = createRoute({
  operationId: 'submitSource',
  method: 'post',
  path: SOURCES_ROUTE,
  summary: 'Fetch the best audio of a URL as a 44.1 kHz WAV, asynchronously.',
  security: apiKeySecurity,
  request: { body: { content: { 'application/json': { schema: SubmitSourceBody } }, required: true } },
  responses: {
    202: {
      description: 'Accepted: the job record. Poll Location. A URL already stored gives a job that is born done.',
      headers: { Location: { schema: { type: 'string' }, description: '/jobs/{id}' } },
      content: { 'application/json': { schema: JobSchema } },
    },
    400: problemResponseSpec('Malformed body, URL or callback_url.'),
    413: problemResponseSpec('Body larger than 8 KiB.'),
    415: problemResponseSpec('Body is not JSON.'),
    422: problemResponseSpec("The URL's or the callback_url's destination is refused by the address policy."),
    ...commonErrorResponses,
  },
});

export const submitSourceBatchRoute = createRoute({
  operationId: 'submitSourceBatch',
  method: 'post',
  path: '/sources/batch',
  summary: `Submit up to ${MAX_BATCH_URLS} URLs at once: one job each, under the same rules as submitSource.`,
  description:
    'A well-formed batch is answered 200 whatever became of each URL: `results` has one item per URL, in the order given, either accepted (with its job record) or refused (with the problem document submitSource would have answered for it alone: 400, 422, 429 queue_full, 503 confinement_unavailable). A URL given twice gets one download that both jobs share. The whole batch is refused (400, 413, 415, 422) only when the body itself is: not JSON, not 1 to 100 strings, or a callback_url that is malformed or refused.',
  security: apiKeySecurity,
  request: { body: { content: { 'application/json': { schema: SubmitSourceBatchBody } }, required: true } },
  responses: {
    200: {
      description: 'The batch was taken: which URLs got a job and which were refused, and why.',
      content: { 'application/json': { schema: BatchResultSchema } },
    },
    400: problemResponseSpec('Malformed body (not 1 to 100 strings, unknown members) or callback_url.'),
    413: problemResponseSpec('Body larger than 256 KiB.'),
    415: problemResponseSpec('Body is not JSON.'),
    422: problemResponseSpec("The callback_url's destination is refused by the address policy."),
    ...commonErrorResponses,
  },
});

export interface SourceOperationsDeps {
  admission: KeyAdmission;
  submit: (input: Submission, requestId: string) => Promise<JobView>;
  submitBatch: (input: Parameters<JobService['submitBatch']>[0], requestId: string) => Promise<BatchItem[]>;
  render: (job: JobRow) => Promise<JobRecord>;
  renderView: (view: JobView) => JobRecord;
}

/** submitSource and submitSourceBatch. Their bodies are read by jsonRequestBody, the media-type rule of src/http/media-type.ts. */
export function sourceOperations(deps: SourceOperationsDeps): OperationBinding[] {
  return [
    bindOperation(submitSourceRoute, {
      maxBodyBytes: MAX_BODY_BYTES,
      async answer(request) {
        const key = deps.admission.admit(request);
        const {
          url,
          playlist,
          callback_url: callbackUrl,
        } = await jsonRequestBody(request, MAX_BODY_BYTES, SubmitSourceBody);
        const { facts } = request;
        const view = await deps.submit(
          {
            url,
            playlist: playlist && { maxItems: playlist.max_items, itemCallbacks: playlist.item_callbacks },
            callbackUrl,
            apiKeyId: jobKeyIdentity(key),
          },
          facts.id,
        );
        const { job } = view;
        // Told by the request's access line, not a line of its own.
        facts.jobId = job.id;
        facts.submitted = { status: job.status, bornDone: job.bornDone, callback: callbackUrl !== undefined };
        return jsonAnswer(202, JSON.stringify(deps.renderView(view)), { location: `/jobs/${job.id}` });
      },
    }),
    bindOperation(submitSourceBatchRoute, {
      maxBodyBytes: MAX_BATCH_BODY_BYTES,
      async answer(request) {
        const key = deps.admission.admit(request);
        const { urls, callback_url: callbackUrl } = await jsonRequestBody(
          request,
          MAX_BATCH_BODY_BYTES,
          SubmitSourceBatchBody,
        );
        const { facts } = request;
        const sources = urls.map((entry) =>
          typeof entry === 'string'
            ? entry
            : {
                url: entry.url,
                playlist: entry.playlist && {
                  maxItems: entry.playlist.max_items,
                  itemCallbacks: entry.playlist.item_callbacks,
                },
              },
        );
        const items = await deps.submitBatch({ urls: sources, callbackUrl, apiKeyId: jobKeyIdentity(key) }, facts.id);
        const results: BatchResult['results'] = [];
        for (const item of items) {
          if ('job' in item) {
            results.push({ outcome: 'accepted', url: item.url, job: await deps.render(item.job) });
          } else {
            results.push({ outcome: 'refused', url: item.url, problem: refusalProblem(item.refusal) });
          }
        }
        const accepted = results.filter((result) => result.outcome === 'accepted').length;
        const jobIds = items.flatMap((item) => ('job' in item ? [item.job.id] : []));
        facts.log.info(
          { accepted, refused: results.length - accepted, job_ids: jobIds, callback: callbackUrl !== undefined },
          'source batch submitted',
        );
        return jsonAnswer(200, JSON.stringify({ accepted, refused: results.length - accepted, results }));
      },
    }),
  ];
}
