import type { MiddlewareHandler } from 'hono';
import type { AppEnv } from '../env.js';
import { routeTemplate } from '../route-template.js';

/**
 * One log line per request: method, route template (never the concrete path, which may carry
 * a signature), status and latency.
 */
export function accessLog(): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const started = performance.now();
    await next();
    c.get('log').info(
      { method: c.req.method, route: routeTemplate(c), status: c.res.status, latency_ms: Math.round((performance.now() - started) * 10) / 10 },
      'request',
    );
  };
}
