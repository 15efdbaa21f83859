import type { MiddlewareHandler } from 'hono';
import type { KeyAdmission } from '../key-admission.js';
import type { AppEnv } from '../env.js';

/** An operation's admission (../key-admission.ts) for the routes the app answers with handlers of their own: the event streams. */
export function admitted(admission: KeyAdmission): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    admission.admit({ header: (name) => c.req.header(name) });
    await next();
  };
}
