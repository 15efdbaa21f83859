import type { Context } from 'hono';
import { matchedRoutes } from 'hono/route';

export const ARTIFACT_ROUTE = '/artifacts/{cid}/{name}';
export const JOB_ROUTE = '/jobs/{id}';
export const SOURCES_ROUTE = '/sources';

/** A route template as a Hono path pattern: '/jobs/{id}' is '/jobs/:id'. */
export function honoPath(template: string): string {
  return template.replace(/\{([A-Za-z0-9_]+)\}/g, ':$1');
}

/**
 * The route template that answered a request, in OpenAPI form ('/jobs/{id}'), for logs and
 * metrics: never the concrete path. Middleware is registered for method ALL, handlers for their
 * own methods, so the last matched non-ALL route is the handler's. No handler: 'unmatched'.
 */
export function routeTemplate(c: Context): string {
  const handler = matchedRoutes(c).findLast((route) => route.method !== 'ALL');
  if (!handler) return 'unmatched';
  let template = templates.get(handler.path);
  if (template === undefined) {
    template = handler.path.replace(/:([A-Za-z0-9_]+)/g, '{$1}');
    templates.set(handler.path, template);
  }
  return template;
}

// Hono path → template; as many entries as the app has routes.
const templates = new Map<string, string>();
