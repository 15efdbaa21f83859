import type { HttpBindings } from '@hono/node-server';
import type { Context, Handler } from 'hono';
import { artifactNotFound } from '../delivery/artifact-path.js';
import type { FileBodies } from '../delivery/file-body.js';
import type { AppEnv } from './env.js';
import { bodyTooLarge, readBodyText } from './json-request-body.js';
import { responseOf } from './answer.js';
import { answerOf, type ApiRequest, type Operation } from './operation.js';
import { errorAnswer } from './problem.js';

/**
 * An operation (./operation.ts) as a Hono handler: the app's way of dispatching to the same
 * operations that node's router (./node-router.ts) calls.
 */
export function honoOperation(operation: Operation, bodies: FileBodies): Handler<AppEnv> {
  return async (c) => {
    const facts = c.get('facts');
    const answer = await answerOf(operation, honoApiRequest(c), facts.log);
    if (!answer.file || c.req.method === 'HEAD') return responseOf(answer);
    const { absolutePath, start, end } = answer.file;
    try {
      return new Response(await bodies.body(absolutePath, start, end), {
        status: answer.status,
        headers: answer.headers,
      });
    } catch (err) {
      // Gone (evicted since it resolved) or unreadable before anything was written: say so.
      const gone = (err as NodeJS.ErrnoException).code === 'ENOENT';
      return responseOf(errorAnswer(gone ? artifactNotFound() : err, facts.id, facts.log));
    }
  };
}

function honoApiRequest(c: Context<AppEnv>): ApiRequest {
  const incoming = (c.env as Partial<HttpBindings> | undefined)?.incoming;
  return {
    method: c.req.method,
    params: c.req.param(),
    header: (name) => c.req.header(name),
    query: (name) => c.req.query(name),
    // Under node's server the body is read from node's request itself, as node's router reads it.
    text: incoming ? (maxBytes) => readBodyText(incoming, maxBytes) : (maxBytes) => boundedText(c.req.raw, maxBytes),
    facts: c.get('facts'),
  };
}

/** The app asked directly (unit tests' app.request): the web Request's body, bounded the same way. */
async function boundedText(request: Request, maxBytes: number): Promise<string> {
  if (Number(request.headers.get('content-length') ?? 0) > maxBytes) throw bodyTooLarge(maxBytes);
  const bytes = new Uint8Array(await request.arrayBuffer());
  if (bytes.byteLength > maxBytes) throw bodyTooLarge(maxBytes);
  return new TextDecoder('utf-8').decode(bytes);
}
