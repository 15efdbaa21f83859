import type { MiddlewareHandler } from 'hono';
import type { HttpBindings } from '@hono/node-server';
import type { Logger } from '../../logger.js';
import type { AppEnv } from '../env.js';
import { proxyLogHeaders } from '../proxy-log-headers.js';
import { acceptedRequestId, newRequestFacts, requestFacts } from '../request-envelope.js';
import { routeTemplate } from '../route-template.js';

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
    const facts =
      requestFacts(bindings?.incoming) ?? newRequestFacts(acceptedRequestId(c.req.header('x-request-id')), options.log);
    facts.route = routeTemplate(c);
    c.set('facts', facts);
    const outgoing = bindings?.outgoing;
    if (outgoing) {
      // The route's parameters are its handler's, not yet this middleware's: read off the path.
      const headers = proxyLogHeaders(facts.route, { cid: c.req.path.split('/')[2] });
      for (const [name, value] of Object.entries(headers)) outgoing.setHeader(name, value);
    }
    await next();
  };
}
