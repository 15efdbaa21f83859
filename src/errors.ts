import type { ApiErrorCode, KindOf } from './api-errors.js';

export type { ErrorKind } from './api-errors.js';

export interface FieldError {
  path: string;
  message: string;
}

/**
 * The one error type that service code throws. It knows nothing of HTTP: `kind` says what went
 * wrong in words the edge maps to a status (src/http/problem.ts), `code` is the stable
 * machine-readable identifier clients switch on, from the closed list of src/api-errors.ts (whose
 * entry fixes the kind: the type checker refuses an unknown code or a kind that is not its own),
 * and `message` is safe to show to a client (never a stack trace, a server path or a secret).
 */
export class ServiceError<C extends ApiErrorCode = ApiErrorCode> extends Error {
  constructor(
    readonly kind: KindOf<C>,
    readonly code: C,
    message: string,
    readonly extra: {
      fieldErrors?: FieldError[];
      retryAfterSeconds?: number;
      /** Extra members of the problem document, e.g. the refused host. */
      fields?: Record<string, unknown>;
    } = {},
  ) {
    super(message);
    this.name = 'ServiceError';
  }

  /** As `instanceof` always answers; declared so that it narrows to a ServiceError of any listed code, not of `any`. */
  static override [Symbol.hasInstance](value: unknown): value is ServiceError {
    return Function.prototype[Symbol.hasInstance].call(this, value);
  }
}
