import { OpenAPIHono } from '@hono/zod-openapi';
import type { Handler } from 'hono';
import type { JobRow } from './db/database.js';
import type { BatchItem, JobView, Submission } from './jobs/job-service.js';
import { presentedKey, type KeyChecker } from './http/api-key.js';
import type { AppEnv } from './http/env.js';
import { keyIdentity, rateLimit, type RateLimiter } from './http/middleware/rate-limit.js';
import { requireApiKey } from './http/middleware/require-api-key.js';
import { OPENAPI_DOCUMENT } from './http/openapi.js';
import { createErrorHandler, problemResponse, validationProblem } from './http/problem.js';
import { registerArtifactRoutes } from './http/routes/artifacts.js';
import { registerHealthRoute } from './http/routes/health.js';
import { registerJobRoutes } from './http/routes/jobs.js';
import { registerMetricsRoute } from './http/routes/metrics.js';
import { registerSourceRoutes } from './http/routes/sources.js';
import { registerStoreRoutes } from './http/routes/store.js';
import type { JobEventStreams } from './http/job-events.js';
import type { HealthReport, JobRecord } from './http/schemas.js';
import type { Logger } from './logger.js';
import type { Metrics } from './metrics.js';
import type { Scrubber } from './store/scrubber.js';
import { requestContext } from './http/middleware/request-context.js';

/**
 * The HTTP application: middleware, the error handler and the routes. It does no I/O of its
 * own at construction; everything it touches arrives in `deps`.
 */
export interface AppDeps {
  log: Logger;
  checkKey: KeyChecker;
  /** The new job's view (JobService.submit). */
  submitSource: (input: Submission, requestId: string) => Promise<JobView>;
  submitSourceBatch: (input: { urls: string[]; callbackUrl?: string; apiKeyId?: string }, requestId: string) => Promise<BatchItem[]>;
  getJob: (id: string) => Promise<JobRow>;
  /** The job's record (getJob), read in one go; throws not_found. */
  readJob: (id: string) => Promise<JobRecord>;
  cancelJob: (id: string) => Promise<JobRow>;
  renderJob: (job: JobRow) => Promise<JobRecord>;
  renderView: (view: JobView) => JobRecord;
  /** getJobEvents' streams (src/http/job-events.ts). */
  jobEvents: JobEventStreams;
  serveArtifact: Handler<AppEnv>;
  checkHealth: () => Promise<HealthReport>;
  metrics: Metrics;
  /** Per-API-key request rate limit (RATE_LIMIT_PER_MINUTE); absent: no limit. */
  rateLimiter?: RateLimiter;
  /** scrubStore and getStoreScrub (src/store/scrubber.ts). */
  scrubber: Pick<Scrubber, 'request' | 'latest'>;
}

export function createApp(deps: AppDeps): OpenAPIHono<AppEnv> {
  const app = new OpenAPIHono<AppEnv>({
    defaultHook: (result, c) => {
      if (result.success) return;
      return validationProblem(result.error, c.get('facts').id);
    },
  });

  app.openAPIRegistry.registerComponent('securitySchemes', 'bearerAuth', { type: 'http', scheme: 'bearer' });
  app.openAPIRegistry.registerComponent('securitySchemes', 'apiKeyHeader', { type: 'apiKey', in: 'header', name: 'X-API-Key' });

  // The request id, access log and metrics are the request envelope's (src/http/request-envelope.ts).
  app.use('*', requestContext({ log: deps.log }));
  app.onError(createErrorHandler((c) => c.get('facts')?.log ?? deps.log));
  if (deps.rateLimiter) {
    // Counted per valid key, on every route but the health check; requests without a valid key
    // are not counted here (authentication answers them 401), nor those a lane counted already.
    app.use(
      '*',
      rateLimit({
        limiter: deps.rateLimiter,
        identify: (c) => {
          if (c.req.path === '/healthz' || c.get('facts').rateCounted) return undefined;
          const key = presentedKey(c.req.raw.headers);
          return key !== undefined && deps.checkKey(key) ? keyIdentity(key) : undefined;
        },
      }),
    );
  }
  app.notFound((c) => problemResponse(404, 'route_not_found', 'No such route.', { requestId: c.get('facts').id }));

  // Open: the health check (for probes) and the interface description.
  registerHealthRoute(app, { check: deps.checkHealth });
  app.doc31('/openapi.json', OPENAPI_DOCUMENT);

  // Artifacts accept a key or a signed URL; the delivery handler checks both.
  registerArtifactRoutes(app, { serve: deps.serveArtifact });

  const keyed = requireApiKey({ checkKey: deps.checkKey });
  app.use('/sources', keyed);
  app.use('/sources/*', keyed);
  app.use('/jobs/*', keyed);
  registerMetricsRoute(app, { metrics: deps.metrics, requireKey: keyed });
  registerStoreRoutes(app, { scrubber: deps.scrubber, requireKey: keyed });
  registerSourceRoutes(app, { submit: deps.submitSource, submitBatch: deps.submitSourceBatch, render: deps.renderJob, renderView: deps.renderView });
  registerJobRoutes(app, { get: deps.getJob, read: deps.readJob, cancel: deps.cancelJob, render: deps.renderJob, events: deps.jobEvents });

  return app;
}
