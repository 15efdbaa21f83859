import { createRoute, z } from '@hono/zod-openapi';
import type { Metrics } from '../../metrics.js';
import { apiKeySecurity, commonErrorResponses } from '../error-responses.js';
import type { KeyAdmission } from '../key-admission.js';
import { bindOperation, type OperationBinding } from '../operation.js';

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

export function metricsOperation(deps: { metrics: Metrics; admission: KeyAdmission }): OperationBinding {
  const { registry } = deps.metrics;
  return bindOperation(getMetricsRoute, {
    async answer(request) {
      deps.admission.admit(request);
      return { status: 200, headers: { 'content-type': registry.contentType }, body: await registry.metrics() };
    },
  });
}
