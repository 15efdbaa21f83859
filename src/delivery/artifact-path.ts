import { realpath, stat } from 'node:fs/promises';
import path from 'node:path';
import { ServiceError } from '../errors.js';
import { artifactRelativePath, CONTENT_ID_PATTERN } from '../store/layout.js';

/**
 * Maps an artifact address (cid, name) to a regular file inside the artifact root, or refuses.
 * Only names are checked, realpath'd and stat'ed here: no file is opened, so nothing outside
 * the root is ever read. Anything that is not a file inside the root answers exactly like an
 * unknown artifact, so a refusal never tells what exists elsewhere.
 */
export interface ResolvedArtifact {
  /** The file's real path (symlinks resolved), inside the root's real path. */
  absolutePath: string;
  /** The real path relative to the root's real path, with forward slashes. */
  relativePath: string;
  size: number;
  mtimeMs: number;
}

const MAX_NAME_BYTES = 255;
// C0 controls, DEL and C1 controls; NUL among them.
const CONTROL_CHARACTER = /[\u0000-\u001f\u007f-\u009f]/;
// Not valid UTF-16, so neither a file name on disk nor encodable in a header.
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** Why `name` is not a plain file name, or null when it is. */
export function artifactNameProblem(name: string): string | null {
  if (name === '') return 'is empty';
  if (Buffer.byteLength(name, 'utf8') > MAX_NAME_BYTES) return `is longer than ${MAX_NAME_BYTES} bytes`;
  if (name.includes('/') || name.includes('\\')) return 'contains a slash or backslash';
  if (CONTROL_CHARACTER.test(name)) return 'contains a control character';
  // '.', '..' and hidden files alike: the store never publishes a name starting with a dot.
  if (name.startsWith('.')) return 'starts with a dot';
  if (LONE_SURROGATE.test(name)) return 'is not well-formed Unicode';
  return null;
}

export function invalidArtifactPath(detail: string): ServiceError {
  return new ServiceError('invalid_input', 'artifact_path_invalid', detail);
}

export function artifactNotFound(): ServiceError {
  return new ServiceError('not_found', 'artifact_not_found', 'No artifact has this content id and name.');
}

export async function resolveArtifactPath(root: string, cid: string, name: string): Promise<ResolvedArtifact> {
  if (!CONTENT_ID_PATTERN.test(cid))
    throw invalidArtifactPath('The content id must be 64 lowercase hexadecimal characters.');
  const problem = artifactNameProblem(name);
  if (problem) throw invalidArtifactPath(`The artifact name ${problem}.`);

  let realRoot: string;
  let realFile: string;
  try {
    [realRoot, realFile] = await Promise.all([
      realpath(root),
      realpath(path.join(root, artifactRelativePath(cid, name))),
    ]);
  } catch (err) {
    throw missingOr(err);
  }
  // The separator matters: /data/root-evil must not pass as inside /data/root.
  const prefix = realRoot.endsWith(path.sep) ? realRoot : realRoot + path.sep;
  if (!realFile.startsWith(prefix)) throw artifactNotFound();

  let info;
  try {
    info = await stat(realFile);
  } catch (err) {
    throw missingOr(err);
  }
  if (!info.isFile()) throw artifactNotFound();
  return {
    absolutePath: realFile,
    relativePath: realFile.slice(prefix.length).split(path.sep).join('/'),
    size: info.size,
    mtimeMs: info.mtimeMs,
  };
}

export type ArtifactResolver = (cid: string, name: string) => Promise<ResolvedArtifact>;

/**
 * resolveArtifactPath with its successes remembered for a moment (default 2 s, at most 1,024
 * addresses). Content under an address never changes, so a remembered answer can only go stale
 * by the file's removal (eviction); then opening it (fallback) or nginx (internal redirect) finds
 * it gone and answers 404 all the same. On hot artifacts this saves two realpath calls and a stat
 * per request, each a trip through libuv's thread pool. Refusals and misses are never
 * remembered: content stored a moment later is served at once.
 */
export function createArtifactResolver(
  root: string,
  opts: { now: () => number; ttlMs?: number; maxEntries?: number },
): ArtifactResolver {
  const ttlMs = opts.ttlMs ?? 2000;
  const maxEntries = opts.maxEntries ?? 1024;
  const remembered = new Map<string, { at: number; artifact: ResolvedArtifact }>();
  return async (cid, name) => {
    // Only valid addresses are ever stored, so an invalid cid or name can never match a key.
    const key = `${cid}/${name}`;
    const hit = remembered.get(key);
    if (hit && opts.now() - hit.at < ttlMs) return hit.artifact;
    const artifact = await resolveArtifactPath(root, cid, name);
    remembered.delete(key);
    if (remembered.size >= maxEntries) remembered.delete(remembered.keys().next().value!);
    remembered.set(key, { at: opts.now(), artifact });
    return artifact;
  };
}

/** File-system errors that mean "no such artifact" (missing, a loop, not readable); others are real failures. */
function missingOr(err: unknown): unknown {
  const code = (err as NodeJS.ErrnoException).code;
  return code === 'ENOENT' || code === 'ENOTDIR' || code === 'ELOOP' || code === 'EACCES' || code === 'ENAMETOOLONG'
    ? artifactNotFound()
    : err;
}
