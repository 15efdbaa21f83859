import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import type { MiddlewareHandler } from 'hono';
import type { Metrics } from '../../metrics.js';
import type { AppEnv } from '../env.js';
import { apiKeySecurity, commonErrorResponses } from '../error-responses.js';

export const getMetricsRoute = createRoute({
  operationId: 'getMetrics',
  method: 'get',
  path: '/metrics',
  summary: 'Prometheus metrics (text exposition format). Prometheus scrapes with the API key as a bearer token.',
  security: apiKeySecurity,
  responses: {
    200: {
      description: 'Every series, prefixed source_fetch_.',
      content: { 'text/plain': { schema: z.string() } },
    },
    ...commonErrorResponses,
  },
});

export function registerMetricsRoute(
  app: OpenAPIHono<AppEnv>,
  deps: { metrics: Metrics; admit: MiddlewareHandler<AppEnv> },
): void {
  app.use('/metrics', deps.admit);
  app.openapi(getMetricsRoute, async (c) => {
    return c.text(await deps.metrics.registry.metrics(), 200, { 'Content-Type': deps.metrics.registry.contentType });
  });
}
