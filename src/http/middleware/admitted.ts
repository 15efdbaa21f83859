import type { MiddlewareHandler } from 'hono';
import type { KeyAdmission } from '../key-admission.js';
import type { AppEnv } from '../env.js';

/** The operation's admission (src/http/admission.ts) for a route the app answers with a handler of its own. */
export function admitted(admission: KeyAdmission): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    admission.admit({ header: (name) => c.req.header(name) });
    await next();
  };
}
