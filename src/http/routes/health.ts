import { createRoute, type OpenAPIHono } from '@hono/zod-openapi';
import type { AppEnv } from '../env.js';
import { HealthSchema, type HealthReport } from '../schemas.js';

export const healthRoute = createRoute({
  operationId: 'getHealth',
  method: 'get',
  path: '/healthz',
  summary: 'Whether the service can fetch: downloader, ffmpeg, database, artifact root. No key needed.',
  // Open to probes: no key.
  security: [],
  responses: {
    200: { description: 'The service can fetch.', content: { 'application/json': { schema: HealthSchema } } },
    503: { description: 'The service cannot fetch now.', content: { 'application/json': { schema: HealthSchema } } },
  },
});

export function registerHealthRoute(app: OpenAPIHono<AppEnv>, deps: { check: () => Promise<HealthReport> }): void {
  app.openapi(healthRoute, async (c) => {
    const report = await deps.check();
    c.header('Cache-Control', 'no-store');
    return report.can_fetch ? c.json(report, 200) : c.json(report, 503);
  });
}
