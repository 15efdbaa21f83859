import type { MiddlewareHandler } from 'hono';
import { ServiceError } from '../../errors.js';
import { presentedKey, type KeyChecker } from '../api-key.js';
import type { AppEnv } from '../env.js';

/** 401 unless the request presents a valid key; the answer never says which part was wrong. */
export function requireApiKey(options: { checkKey: KeyChecker }): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    if (!options.checkKey(presentedKey(c.req.raw.headers))) {
      throw new ServiceError('unauthorized', 'unauthorized', 'A valid API key is required (Authorization: Bearer <key> or X-API-Key).');
    }
    await next();
  };
}
