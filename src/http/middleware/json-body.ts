import type { MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { ServiceError } from '../../errors.js';
import type { AppEnv } from '../env.js';

/**
 * For operations that take a JSON body: 415 unless the body is declared as JSON, 413 past
 * maxBytes (counted while reading, whatever Content-Length claims), 400 if it does not parse.
 * Hono caches the parsed body, so the route's validator does not read it again.
 */
export function jsonBody(options: { maxBytes: number }): MiddlewareHandler<AppEnv> {
  const limit = bodyLimit({
    maxSize: options.maxBytes,
    onError: () => {
      throw new ServiceError('payload_too_large', 'body_too_large', `The request body exceeds ${options.maxBytes} bytes.`);
    },
  });
  return async (c, next) => {
    const type = c.req.header('content-type') ?? '';
    if (!/^application\/([\w.-]+\+)?json\s*(;|$)/i.test(type)) {
      throw new ServiceError('unsupported_media_type', 'unsupported_media_type', 'The request body must be JSON (Content-Type: application/json).');
    }
    await limit(c, async () => {
      try {
        await c.req.json();
      } catch (err) {
        if (err instanceof ServiceError) throw err;
        throw new ServiceError('invalid_input', 'invalid_json', 'The request body is not valid JSON.');
      }
      await next();
    });
  };
}
