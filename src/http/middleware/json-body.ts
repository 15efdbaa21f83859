import type { IncomingMessage } from 'node:http';
import type { HttpBindings } from '@hono/node-server';
import type { MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { ServiceError } from '../../errors.js';
import type { AppEnv } from '../env.js';

/** A JSON media type, with or without parameters (`application/json`, `application/problem+json; charset=utf-8`). */
export function isJsonContentType(type: string): boolean {
  return /^application\/([\w.-]+\+)?json\s*(;|$)/i.test(type);
}

/** Bodies a lane in front of the app read before handing their request to it (src/http/submit-lane.ts). */
const readAhead = new WeakMap<IncomingMessage, Promise<string>>();

/** The app is to take this request's body as `text`: a lane read it already. */
export function handBodyToApp(incoming: IncomingMessage, text: Promise<string>): void {
  readAhead.set(incoming, text);
}

/**
 * For operations that take a JSON body: 415 unless the body is declared as JSON, 413 past
 * maxBytes (counted while reading, whatever Content-Length claims), 400 if it does not parse.
 * The text is left in Hono's body cache, so the route's validator does not read it again.
 *
 * Under node's server the body is read from node's request itself: reading it through the web
 * Request that @hono/node-server would build for it (a ReadableStream, an AbortController) was a
 * tenth of a born-done submission's CPU time (bench/api.ts profile).
 */
export function jsonBody(options: { maxBytes: number }): MiddlewareHandler<AppEnv> {
  const tooLarge = () => new ServiceError('payload_too_large', 'body_too_large', `The request body exceeds ${options.maxBytes} bytes.`);
  const limit = bodyLimit({
    maxSize: options.maxBytes,
    onError: () => {
      throw tooLarge();
    },
  });
  const parse = async (text: Promise<string>) => {
    try {
      JSON.parse(await text);
    } catch (err) {
      if (err instanceof ServiceError) throw err;
      throw new ServiceError('invalid_input', 'invalid_json', 'The request body is not valid JSON.');
    }
  };
  return async (c, next) => {
    const type = c.req.header('content-type') ?? '';
    if (!isJsonContentType(type)) {
      throw new ServiceError('unsupported_media_type', 'unsupported_media_type', 'The request body must be JSON (Content-Type: application/json).');
    }
    const incoming = (c.env as Partial<HttpBindings> | undefined)?.incoming;
    if (incoming) {
      const text = readAhead.get(incoming) ?? readBodyText(incoming, options.maxBytes, tooLarge);
      (c.req.bodyCache as { text?: Promise<string> }).text = text;
      await parse(text);
      return next();
    }
    // The app asked directly (unit tests): Hono reads the body.
    await limit(c, async () => {
      await parse(c.req.text());
      await next();
    });
  };
}

/**
 * The body as UTF-8 text (a leading BOM dropped, as the web's Request.text() does). Past
 * maxBytes it stops reading and rejects; the rest stays unread, and the server closes the
 * connection after the answer (src/http/server.ts).
 */
export function readBodyText(incoming: IncomingMessage, maxBytes: number, tooLarge: () => Error): Promise<string> {
  return new Promise((resolve, reject) => {
    if (Number(incoming.headers['content-length'] ?? 0) > maxBytes) return reject(tooLarge());
    const chunks: Buffer[] = [];
    let bytes = 0;
    // The error listener stays: a request destroyed later must not throw where nobody listens.
    const stop = (err: Error) => {
      incoming.off('data', onData).off('end', onEnd).off('aborted', onAborted);
      incoming.pause();
      reject(err);
    };
    const onData = (chunk: Buffer) => {
      bytes += chunk.length;
      if (bytes > maxBytes) return stop(tooLarge());
      chunks.push(chunk);
    };
    const onEnd = () => resolve(new TextDecoder('utf-8').decode(Buffer.concat(chunks, bytes)));
    const onAborted = () => stop(new Error('the client went away while sending the body'));
    incoming.on('data', onData).once('end', onEnd).once('error', stop).once('aborted', onAborted);
  });
}
