/**
 * The one error type that service code throws. It knows nothing of HTTP: `kind` says what went
 * wrong in words the edge maps to a status (src/http/problem.ts), `code` is the stable
 * machine-readable identifier clients switch on, and `message` is safe to show to a client
 * (never a stack trace, a server path or a secret).
 */
export type ErrorKind =
  | 'invalid_input' // 400: malformed request
  | 'unauthorized' // 401
  | 'forbidden' // 403
  | 'not_found' // 404
  | 'conflict' // 409
  | 'payload_too_large' // 413
  | 'unsupported_media_type' // 415
  | 'refused' // 422: well-formed, but policy refuses it (a URL's destination, say)
  | 'rate_limited' // 429
  | 'unavailable' // 503
  | 'internal'; // 500

export interface FieldError {
  path: string;
  message: string;
}

export class ServiceError extends Error {
  constructor(
    readonly kind: ErrorKind,
    readonly code: string,
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
}
