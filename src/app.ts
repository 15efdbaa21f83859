import { OpenAPIHono } from '@hono/zod-openapi';
import type { JobRow } from './db/database.js';
import type { FileBodies } from './delivery/file-body.js';
import type { KeyAdmission } from './http/key-admission.js';
import type { AppEnv } from './http/env.js';
import { honoOperation } from './http/hono-operation.js';
import type { JobEventStreams } from './http/job-events.js';
import { requestContext } from './http/middleware/request-context.js';
import { OPENAPI_DOCUMENT } from './http/openapi.js';
import type { OperationBinding } from './http/operation.js';
import { responseOf } from './http/answer.js';
import { createErrorHandler, problemAnswer, serviceErrorAnswer, validationError } from './http/problem.js';
import { getArtifactRoute } from './http/routes/artifacts.js';
import { registerEventRoutes } from './http/routes/events.js';
import { healthRoute } from './http/routes/health.js';
import { cancelJobRoute, getJobRoute, listJobItemsRoute } from './http/routes/jobs.js';
import { getMetricsRoute } from './http/routes/metrics.js';
import { submitSourceBatchRoute, submitSourceRoute } from './http/routes/sources.js';
import { getStoreScrubRoute, scrubStoreRoute } from './http/routes/store.js';
import { getWebhookSecretRoute } from './http/routes/webhook-secret.js';
import { registerWebPage, type WebFiles } from './http/web-page.js';
import type { Logger } from './logger.js';

/**
 * The HTTP application: the OpenAPI contract, the request context, the error handler, the API's
 * operations (the same ones node's router dispatches to: src/http/operation.ts) and the routes
 * only the app answers (the contract itself, event streams, the web page). It does no I/O of its
 * own at construction; everything it touches arrives in `deps`.
 */
export interface AppDeps {
  log: Logger;
  admission: KeyAdmission;
  /** Every operation of OPERATION_CONTRACTS, bound (src/http/operation.ts). */
  operations: readonly OperationBinding[];
  /** Sends the files of getArtifact's answers. */
  bodies: FileBodies;
  getJob: (id: string) => Promise<JobRow>;
  /** The rows of those of `ids` that exist. */
  getJobs: (ids: string[]) => Promise<JobRow[]>;
  /** getJobEvents' and getEvents' streams (src/http/job-events.ts). */
  jobEvents: JobEventStreams;
  /** The web page's files (src/http/web-page.ts), open like the health check: they hold no data. */
  webFiles: WebFiles;
}

/**
 * The contracts of the operations (the event streams' are registerEventRoutes'), in the order of
 * openapi.json; described apart from the operations that answer them, which need the service.
 */
const OPERATION_CONTRACTS = [
  healthRoute,
  getArtifactRoute,
  getMetricsRoute,
  scrubStoreRoute,
  getStoreScrubRoute,
  getWebhookSecretRoute,
  submitSourceRoute,
  submitSourceBatchRoute,
  getJobRoute,
  cancelJobRoute,
  listJobItemsRoute,
];

export function createApp(deps: AppDeps): OpenAPIHono<AppEnv> {
  const app = new OpenAPIHono<AppEnv>({
    defaultHook: (result, c) => {
      if (result.success) return;
      return responseOf(serviceErrorAnswer(validationError(result.error), c.get('facts').id));
    },
  });

  app.openAPIRegistry.registerComponent('securitySchemes', 'bearerAuth', { type: 'http', scheme: 'bearer' });
  app.openAPIRegistry.registerComponent('securitySchemes', 'apiKeyHeader', {
    type: 'apiKey',
    in: 'header',
    name: 'X-API-Key',
  });

  // The request id, access log and metrics are the request envelope's (src/http/request-envelope.ts).
  app.use('*', requestContext({ log: deps.log }));
  app.onError(createErrorHandler((c) => c.get('facts')?.log ?? deps.log));
  app.notFound((c) => responseOf(problemAnswer('route_not_found', 'No such route.', { requestId: c.get('facts').id })));

  // Open: the interface description and the web page.
  app.doc31('/openapi.json', OPENAPI_DOCUMENT);
  registerWebPage(app, deps.webFiles);

  for (const contract of OPERATION_CONTRACTS) app.openAPIRegistry.registerPath(contract);
  registerEventRoutes(app, {
    admission: deps.admission,
    get: deps.getJob,
    getMany: deps.getJobs,
    events: deps.jobEvents,
  });
  for (const { method, path, operation } of deps.operations)
    app.on(method, path, honoOperation(operation, deps.bodies));

  return app;
}
