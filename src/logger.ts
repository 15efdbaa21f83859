import pino from 'pino';

export type Logger = pino.Logger;

/**
 * JSON logs with pino. Secrets are kept out at the source (nothing logs a key, a signature or a
 * URL's credentials); the redact list is a second line of defence for header dumps.
 */
export function createLogger(level: string, destination?: pino.DestinationStream): Logger {
  return pino(
    {
      level,
      base: { service: 'source-fetch' },
      timestamp: pino.stdTimeFunctions.isoTime,
      redact: {
        paths: ['req.headers.authorization', 'req.headers["x-api-key"]', 'headers.authorization', 'headers["x-api-key"]', '*.apiKey', '*.secret'],
        censor: '[redacted]',
      },
    },
    destination,
  );
}
