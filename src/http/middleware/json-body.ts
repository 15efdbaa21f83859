import type { IncomingMessage } from 'node:http';
import type { HttpBindings } from '@hono/node-server';
import type { z } from '@hono/zod-openapi';
import type { MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { ServiceError } from '../../errors.js';
import type { AppEnv } from '../env.js';
import { isJsonMediaType } from '../media-type.js';
import { validationProblem } from '../problem.js';

/** Bodies a lane in front of the app read before handing their request to it (src/http/submit-lane.ts). */
const readAhead = new WeakMap<IncomingMessage, Promise<string>>();

/** The app is to take this request's body as `text`: a lane read it already. */
export function handBodyToApp(incoming: IncomingMessage, text: Promise<string>): void {
  readAhead.set(incoming, text);
}

/**
 * For operations that take a JSON body, in this order: 415 unless the body is declared as JSON
 * (isJsonMediaType, the rule every path shares), 413 past maxBytes (counted while reading, whatever
 * Content-Length claims), 400 `invalid_json` if it does not parse, 400 `validation_failed` if it
 * does not match `schema`. The handler reads the parsed body with `c.req.valid('json')`. The
 * operation is registered without @hono/zod-openapi's own body checks (see registerSourceRoutes),
 * whose media-type rule is not this one.
 *
 * Under node's server the body is read from node's request itself: reading it through the web
 * Request that @hono/node-server would build for it (a ReadableStream, an AbortController) was a
 * tenth of a born-done submission's CPU time (bench/api.ts profile).
 */
export function jsonBody<S extends z.ZodType>(options: {
  maxBytes: number;
  schema: S;
}): MiddlewareHandler<AppEnv, string, { in: { json: z.input<S> }; out: { json: z.output<S> } }> {
  const tooLarge = () => new ServiceError('payload_too_large', 'body_too_large', `The request body exceeds ${options.maxBytes} bytes.`);
  const limit = bodyLimit({
    maxSize: options.maxBytes,
    onError: () => {
      throw tooLarge();
    },
  });
  const parse = async (text: Promise<string>): Promise<unknown> => {
    try {
      return JSON.parse(await text);
    } catch (err) {
      if (err instanceof ServiceError) throw err;
      throw new ServiceError('invalid_input', 'invalid_json', 'The request body is not valid JSON.');
    }
  };
  return async (c, next) => {
    if (!isJsonMediaType(c.req.header('content-type'))) {
      throw new ServiceError('unsupported_media_type', 'unsupported_media_type', 'The request body must be JSON (Content-Type: application/json).');
    }
    const validated = async (text: Promise<string>) => {
      const result = options.schema.safeParse(await parse(text));
      if (!result.success) return validationProblem(result.error, c.get('facts').id);
      c.req.addValidatedData('json', result.data as object);
      return next();
    };
    const incoming = (c.env as Partial<HttpBindings> | undefined)?.incoming;
    if (incoming) {
      const text = readAhead.get(incoming) ?? readBodyText(incoming, options.maxBytes, tooLarge);
      (c.req.bodyCache as { text?: Promise<string> }).text = text;
      return validated(text);
    }
    // The app asked directly (unit tests): Hono reads the body.
    let answer: Response | void = undefined;
    await limit(c, async () => {
      answer = await validated(c.req.text());
    });
    return answer;
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
