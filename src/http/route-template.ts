import type { Context } from 'hono';
import { matchedRoutes } from 'hono/route';

/**
 * The route template that answered a request, in OpenAPI form ('/jobs/{id}'), for logs and
 * metrics: never the concrete path. Middleware is registered for method ALL, handlers for their
 * own methods, so the last matched non-ALL route is the handler's. No handler: 'unmatched'.
 */
export function routeTemplate(c: Context): string {
  const handler = matchedRoutes(c).findLast((route) => route.method !== 'ALL');
  return handler ? handler.path.replace(/:([A-Za-z0-9_]+)/g, '{$1}') : 'unmatched';
}
