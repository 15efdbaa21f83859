import type { Context } from 'hono';
import { matchedRoutes } from 'hono/route';

/**
 * The route template that answered a request, in OpenAPI form ('/jobs/{id}'), for logs and
 * metrics: never the concrete path. Middleware is registered for method ALL, handlers for their
 * own methods, so the last matched non-ALL route is the handler's. No handler: 'unmatched'.
 */
/** The artifact route, which the fallback's signed lane also answers. */
export const ARTIFACT_ROUTE = '/artifacts/{cid}/{name}';
/** getJob's route, which the job lane also answers. */
export const JOB_ROUTE = '/jobs/{id}';
/** submitSource's route, which the submit lane also answers. */
export const SOURCES_ROUTE = '/sources';

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
