import type { MiddlewareHandler } from 'hono';
import { routePath } from 'hono/route';
import type { AppEnv } from '../env.js';

/**
 * One log line per request: method, route template (never the concrete path, which may carry
 * a signature), status and latency.
 */
export function accessLog(): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const started = performance.now();
    await next();
    const route = routePath(c);
    c.get('log').info(
      { method: c.req.method, route, status: c.res.status, latency_ms: Math.round((performance.now() - started) * 10) / 10 },
      'request',
    );
  };
}
