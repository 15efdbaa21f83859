import type { MiddlewareHandler } from 'hono';
import type { HttpBindings } from '@hono/node-server';
import type { Logger } from '../../logger.js';
import { isContentId } from '../../store/layout.js';
import type { AppEnv } from '../env.js';
import { acceptedRequestId, newRequestFacts, requestFacts } from '../request-envelope.js';
import { ARTIFACT_ROUTE, routeTemplate } from '../route-template.js';

/**
 * For the reverse proxy's access log: the route template of every answer and, for artifacts,
 * the content id, in response headers that nginx logs and hides from clients
 * (nginx/templates/default.conf.template).
 */
export const ROUTE_TEMPLATE_HEADER = 'X-Route-Template';
export const CONTENT_ID_HEADER = 'X-Content-Id';

/**
 * Hands the app the facts of its request (src/http/request-envelope.ts: request id, logger, the
 * route and job for the access log) and names the matched route. Hono has matched the route
 * before any middleware runs, so it is known here, before the answer exists; the proxy-log
 * headers go onto node's response the same way, which also puts them on error answers.
 *
 * Without the envelope (the app asked directly, in unit tests) the request gets facts of its own.
 */
export function requestContext(options: { log: Logger }): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const bindings = c.env as Partial<HttpBindings> | undefined;
    const facts = requestFacts(bindings?.incoming) ?? newRequestFacts(acceptedRequestId(c.req.header('x-request-id')), options.log);
    facts.route = routeTemplate(c);
    c.set('facts', facts);
    const outgoing = bindings?.outgoing;
    if (outgoing) {
      outgoing.setHeader(ROUTE_TEMPLATE_HEADER, facts.route);
      // The route's parameters are its handler's, not yet this middleware's: read off the path.
      const cid = facts.route === ARTIFACT_ROUTE ? c.req.path.split('/')[2] : undefined;
      if (cid !== undefined && isContentId(cid)) outgoing.setHeader(CONTENT_ID_HEADER, cid);
    }
    await next();
  };
}
