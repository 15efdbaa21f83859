import type { IncomingMessage, ServerResponse } from 'node:http';
import { artifactNotFound } from '../delivery/artifact-path.js';
import type { FileBodies } from '../delivery/file-body.js';
import type { Logger } from '../logger.js';
import { readBodyText } from './json-request-body.js';
import type { Answer } from './answer.js';
import { answerOf, DEFAULT_MAX_BODY_BYTES, type ApiRequest, type OperationBinding } from './operation.js';
import { errorAnswer } from './problem.js';
import { proxyLogHeaders } from './proxy-log-headers.js';
import { requestFacts, type RequestFacts } from './request-envelope.js';
import { closeIfBodyLeftUnread } from './server.js';

/**
 * Dispatches requests from node's server to the API's operations (./operation.ts) without building
 * the web Request, Response and Headers objects and the middleware chain that the Hono app needs
 * for each: the operations are the app's own, matched the way Hono matches their paths (strictly:
 * no trailing slash, parameters percent-decoded), HEAD running the GET route's operation. Every
 * request it has no operation for goes on to the app (`otherwise`).
 */
export type NodeRouter = (req: IncomingMessage, res: ServerResponse, otherwise: () => void) => void;

interface CompiledBinding {
  pattern: RegExp;
  names: string[];
  binding: OperationBinding;
}

export function createNodeRouter(
  bindings: readonly OperationBinding[],
  deps: { bodies: FileBodies; log: Logger },
): NodeRouter {
  const compiled = bindings.map(compileBinding);

  return (req, res, otherwise) => {
    const facts = requestFacts(req);
    const method = req.method === 'HEAD' ? 'GET' : req.method;
    if (!facts) return otherwise();
    const url = req.url ?? '/';
    const queryAt = url.indexOf('?');
    const path = queryAt < 0 ? url : url.slice(0, queryAt);
    for (const { pattern, names, binding } of compiled) {
      if (binding.method !== method) continue;
      const match = pattern.exec(path);
      if (!match) continue;
      const params: Record<string, string> = {};
      try {
        names.forEach((name, i) => (params[name] = decodeURIComponent(match[i + 1]!)));
      } catch {
        return otherwise();
      }
      const { operation } = binding;
      facts.route = operation.route;
      for (const [name, value] of Object.entries(proxyLogHeaders(operation.route, params))) res.setHeader(name, value);
      const request = nodeApiRequest(req, params, queryAt < 0 ? '' : url.slice(queryAt + 1), facts);
      // The request's logger (a child logger) is made only if an error is logged.
      answerOf(operation, request, { error: (obj, msg) => facts.log.error(obj, msg) })
        .then((answer) => send(req, res, answer, facts, deps.bodies))
        .catch((err: unknown) => {
          deps.log.error({ err }, 'answering a request failed');
          res.destroy();
        });
      return;
    }
    otherwise();
  };
}

/** Hono's path pattern ('/jobs/:id') as a regular expression, with its parameters' names. */
function compileBinding(binding: OperationBinding): CompiledBinding {
  const names: string[] = [];
  const source = binding.path.replace(/[.*+?^${}()|[\]\\]/g, '\\$&').replace(/:([A-Za-z0-9_]+)/g, (_, name: string) => {
    names.push(name);
    return '([^/]+)';
  });
  return { pattern: new RegExp(`^${source}$`), names, binding };
}

/**
 * The largest request body a path takes, as its operation sets it (Operation.maxBodyBytes): what
 * node's server lets through an `Expect: 100-continue` (src/http/server.ts).
 */
export function maxBodyBytesByPath(bindings: readonly OperationBinding[]): (path: string) => number {
  const compiled = bindings.map(compileBinding);
  return (path) =>
    compiled.find(({ pattern, binding }) => binding.operation.maxBodyBytes !== undefined && pattern.test(path))?.binding
      .operation.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
}

function nodeApiRequest(
  req: IncomingMessage,
  params: Record<string, string>,
  search: string,
  facts: RequestFacts,
): ApiRequest {
  let query: URLSearchParams | undefined;
  return {
    method: req.method ?? 'GET',
    params,
    header: (name) => headerOf(req, name),
    query: (name) => (query ??= new URLSearchParams(search)).get(name) ?? undefined,
    text: (maxBytes) => readBodyText(req, maxBytes),
    facts,
  };
}

/**
 * A header as fetch's Headers reads it: repeated ones joined with ', '. Node's own `headers` keeps
 * only the first of a repeated Authorization, Content-Type and some others, so the raw headers are
 * read for those; `headersDistinct` would build every header's array on each request.
 */
function headerOf(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  if (value === undefined || !FIRST_KEPT.has(name)) return Array.isArray(value) ? value.join(', ') : value;
  let joined: string | undefined;
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    if (req.rawHeaders[i]!.length === name.length && req.rawHeaders[i]!.toLowerCase() === name) {
      joined = joined === undefined ? req.rawHeaders[i + 1] : `${joined}, ${req.rawHeaders[i + 1]}`;
    }
  }
  return joined;
}

/** The headers whose repeats node drops (node:_http_incoming matchKnownFields), among those operations read. */
const FIRST_KEPT = new Set([
  'authorization',
  'content-type',
  'content-length',
  'if-modified-since',
  'if-unmodified-since',
]);

async function send(
  req: IncomingMessage,
  res: ServerResponse,
  answer: Answer,
  facts: RequestFacts,
  bodies: FileBodies,
): Promise<void> {
  closeIfBodyLeftUnread(req, res);
  const { file } = answer;
  if (file && req.method !== 'HEAD') {
    try {
      await bodies.send(res, file.absolutePath, file.start, file.end, () =>
        res.writeHead(answer.status, answer.headers),
      );
      return;
    } catch (err) {
      if (res.headersSent) throw err;
      // Gone (evicted since it resolved) or unreadable before anything was written: say so.
      const gone = (err as NodeJS.ErrnoException).code === 'ENOENT';
      return send(req, res, errorAnswer(gone ? artifactNotFound() : err, facts.id, facts.log), facts, bodies);
    }
  }
  const body = answer.body ?? '';
  res.writeHead(
    answer.status,
    answer.body === undefined ? answer.headers : { ...answer.headers, 'content-length': Buffer.byteLength(body) },
  );
  res.end(req.method === 'HEAD' ? undefined : body);
}
