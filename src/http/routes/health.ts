import { createRoute } from '@hono/zod-openapi';
import { bindOperation, jsonAnswer, type OperationBinding } from '../operation.js';
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

/** getHealth: open to probes, never counted against a key's rate limit. */
export function healthOperation(deps: { check: () => Promise<HealthReport> }): OperationBinding {
  return bindOperation(healthRoute, {
    async answer() {
      const report = await deps.check();
      return jsonAnswer(report.can_fetch ? 200 : 503, JSON.stringify(report), { 'cache-control': 'no-store' });
    },
  });
}
