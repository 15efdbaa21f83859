import type { IncomingMessage } from 'node:http';
import type { z } from 'zod';
import { ServiceError } from '../errors.js';
import { isJsonMediaType } from './media-type.js';
import type { ApiRequest } from './operation.js';
import { validationError } from './problem.js';

/**
 * The JSON body of an operation that takes one, checked in this order: 415
 * `unsupported_media_type` unless the body is declared as JSON (isJsonMediaType), 413
 * `body_too_large` past maxBytes (counted while reading, whatever Content-Length claims), 400
 * `invalid_json` when it does not parse, 400 `validation_failed` when it does not match `schema`.
 */
export async function jsonRequestBody<S extends z.ZodType>(
  request: ApiRequest,
  maxBytes: number,
  schema: S,
): Promise<z.output<S>> {
  if (!isJsonMediaType(request.header('content-type'))) {
    throw new ServiceError(
      'unsupported_media_type',
      'unsupported_media_type',
      'The request body must be JSON (Content-Type: application/json).',
    );
  }
  const text = await request.text(maxBytes);
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new ServiceError('invalid_input', 'invalid_json', 'The request body is not valid JSON.');
  }
  const result = schema.safeParse(parsed);
  if (!result.success) throw validationError(result.error);
  return result.data;
}

export function bodyTooLarge(maxBytes: number): ServiceError {
  return new ServiceError('payload_too_large', 'body_too_large', `The request body exceeds ${maxBytes} bytes.`);
}

/**
 * A node request's body as UTF-8 text (a leading BOM dropped, as the web's Request.text() does).
 * Past maxBytes it stops reading and rejects with 413; the rest stays unread, and the server
 * closes the connection after the answer (src/http/server.ts).
 */
export function readBodyText(incoming: IncomingMessage, maxBytes: number): Promise<string> {
  return new Promise((resolve, reject) => {
    if (Number(incoming.headers['content-length'] ?? 0) > maxBytes) return reject(bodyTooLarge(maxBytes));
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
      if (bytes > maxBytes) return stop(bodyTooLarge(maxBytes));
      chunks.push(chunk);
    };
    const onEnd = () => resolve(new TextDecoder('utf-8').decode(Buffer.concat(chunks, bytes)));
    const onAborted = () => stop(new Error('the client went away while sending the body'));
    incoming.on('data', onData).once('end', onEnd).once('error', stop).once('aborted', onAborted);
  });
}
