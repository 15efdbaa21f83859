import type { MiddlewareHandler } from 'hono';
import type { Metrics } from '../../metrics.js';
import type { AppEnv } from '../env.js';
import { routeTemplate } from '../route-template.js';

/** Counts every request and its latency by method, route template and status. */
export function requestMetrics(options: { metrics: Metrics }): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const started = performance.now();
    try {
      await next();
    } finally {
      options.metrics.observeRequest(c.req.method, routeTemplate(c), c.res.status, (performance.now() - started) / 1000);
    }
  };
}
