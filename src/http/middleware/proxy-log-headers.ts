import type { MiddlewareHandler } from 'hono';
import { isContentId } from '../../store/layout.js';
import type { AppEnv } from '../env.js';
import { routeTemplate } from '../route-template.js';

/**
 * For the reverse proxy's access log: the route template of every answer and, for artifacts,
 * the content id, in response headers that nginx logs and hides from clients
 * (nginx/templates/default.conf.template). Set on the final response, errors included.
 */
export const ROUTE_TEMPLATE_HEADER = 'X-Route-Template';
export const CONTENT_ID_HEADER = 'X-Content-Id';

export function proxyLogHeaders(): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    await next();
    c.res.headers.set(ROUTE_TEMPLATE_HEADER, routeTemplate(c));
    const cid = c.req.param('cid');
    if (cid !== undefined && isContentId(cid)) c.res.headers.set(CONTENT_ID_HEADER, cid);
  };
}
