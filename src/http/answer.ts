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
