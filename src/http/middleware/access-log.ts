import type { MiddlewareHandler } from 'hono';
import type { AppEnv } from '../env.js';
import { routeTemplate } from '../route-template.js';

/**
 * One log line per request: method, route template (never the concrete path, which may carry
 * a signature), status, latency, and the job it created or addressed.
 */
export function accessLog(): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const started = performance.now();
    await next();
    c.get('log').info(
      {
        method: c.req.method,
        route: routeTemplate(c),
        status: c.res.status,
        latency_ms: Math.round((performance.now() - started) * 10) / 10,
        ...(c.get('jobId') ? { job_id: c.get('jobId') } : {}),
      },
      'request',
    );
  };
}
