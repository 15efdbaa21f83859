/**
 * What an operation answers, whichever dispatcher sends it (./operation.ts): a status, headers,
 * and a body or a slice of a file. Problem documents are answers too (./problem.ts).
 */

/** Bytes start..end (inclusive) of a file, sent after the head. */
export interface FileSlice {
  absolutePath: string;
  start: number;
  end: number;
}

export interface Answer {
  status: number;
  headers: Record<string, string>;
  /** JSON, text or a problem document. */
  body?: string;
  /** A file's bytes instead of `body`; never on an answer to HEAD. */
  file?: FileSlice;
}

/**
 * A bodied answer as a web Response, for the Hono app (./hono-operation.ts, ./problem.ts): JSON,
 * text or a problem document, with its length. A file's bytes are sent by the dispatcher itself.
 */
export function responseOf(answer: Answer): Response {
  const headers =
    answer.body === undefined
      ? answer.headers
      : { ...answer.headers, 'content-length': String(Buffer.byteLength(answer.body)) };
  return new Response(answer.body ?? null, { status: answer.status, headers });
}
