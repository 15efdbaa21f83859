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
      timestamp: isoTimeOncePerMillisecond(),
      redact: {
        paths: [
          'req.headers.authorization',
          'req.headers["x-api-key"]',
          'headers.authorization',
          'headers["x-api-key"]',
          '*.apiKey',
          '*.secret',
        ],
        censor: '[redacted]',
      },
    },
    destination,
  );
}

/**
 * pino's isoTime, with the text made once per millisecond: every request writes a line, and the
 * lines of one millisecond share one Date#toISOString instead of each making the same text.
 */
function isoTimeOncePerMillisecond(): () => string {
  let lastMs = Number.NaN;
  let last = '';
  return () => {
    const ms = Date.now();
    if (ms !== lastMs) {
      lastMs = ms;
      last = `,"time":"${new Date(ms).toISOString()}"`;
    }
    return last;
  };
}
