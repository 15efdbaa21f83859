import { randomUUID } from 'node:crypto';
import type { MiddlewareHandler } from 'hono';
import type { Logger } from '../../logger.js';
import type { AppEnv } from '../env.js';

const WELL_FORMED_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** The client's X-Request-Id when it is well-formed, else a new one. */
export function acceptedRequestId(offered: string | undefined): string {
  return offered && WELL_FORMED_ID.test(offered) ? offered : randomUUID();
}

/**
 * Takes a well-formed X-Request-Id from the client (or a proxy in front), makes one otherwise,
 * returns it, and gives the request a logger that stamps it on every line.
 */
export function requestId(options: { log: Logger; header?: string }): MiddlewareHandler<AppEnv> {
  const header = options.header ?? 'x-request-id';
  return async (c, next) => {
    const id = acceptedRequestId(c.req.header(header));
    c.set('requestId', id);
    c.set('log', options.log.child({ request_id: id }));
    await next();
    // Set on the final response, so error responses made by the error handler carry it too.
    c.res.headers.set('X-Request-Id', id);
  };
}
