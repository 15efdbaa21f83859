import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { eq } from 'drizzle-orm';
import type { Queryable } from './db/database.js';

/** How a new secret's random bytes are written: base64url unless the secret has a form of its own. */
export type SecretEncoding = (bytes: Buffer) => string;
const base64url: SecretEncoding = (bytes) => bytes.toString('base64url');

/**
 * A secret kept in the data dir when the configuration gives none: made at first start with
 * mode 0600, read at every start after. Returns the value and whether it was just created.
 *
 * The file is written in full under a temporary name and only then linked into place, so it
 * never exists empty or half-written (a crash mid-write leaves only the temporary file), and
 * link() refuses to replace a secret another process put there meanwhile. An empty file (left by
 * an older version's crash, or a `touch`) holds no secret anyone could have used: it is replaced.
 */
export function loadOrCreateSecret(
  dataDir: string,
  fileName: string,
  bytes = 32,
  encode: SecretEncoding = base64url,
): { value: string; file: string; created: boolean } {
  const file = path.join(dataDir, fileName);
  const existing = readSecret(file);
  if (existing) return { value: existing, file, created: false };

  const value = encode(randomBytes(bytes));
  const temp = writeBeside(file, value);
  try {
    if (existing === '') fs.renameSync(temp, file);
    else fs.linkSync(temp, file);
  } catch (err) {
    // Another process made it first: use theirs, which is complete.
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return loadOrCreateSecret(dataDir, fileName, bytes, encode);
    throw err;
  } finally {
    fs.rmSync(temp, { force: true });
  }
  return { value, file, created: true };
}

/** Writes `value` in full, mode 0600 and synced, to a temporary file beside `file`; returns its path. */
function writeBeside(file: string, value: string): string {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const temp = `${file}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
  const fd = fs.openSync(temp, 'wx', 0o600);
  try {
    fs.writeSync(fd, `${value}\n`);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  return temp;
}

/** The secret in `file`; '' when the file is empty or blank; undefined when there is none. */
function readSecret(file: string): string | undefined {
  try {
    return fs.readFileSync(file, 'utf8').trim();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

/**
 * A secret the service generates once for every node sharing the database (PostgreSQL): the
 * first node to start makes it, the others read it. Returns the value and whether it was just
 * created.
 */
export async function loadOrCreateSharedSecret(
  q: Queryable,
  name: string,
  now: number,
  bytes = 32,
  encode: SecretEncoding = base64url,
): Promise<{ value: string; created: boolean }> {
  const { serviceSecrets } = q.t;
  const value = encode(randomBytes(bytes));
  const inserted = await q.db
    .insert(serviceSecrets)
    .values({ name, value, createdAt: now })
    .onConflictDoNothing()
    .returning({ value: serviceSecrets.value });
  if (inserted.length > 0) return { value, created: true };
  const [row] = await q.db
    .select({ value: serviceSecrets.value })
    .from(serviceSecrets)
    .where(eq(serviceSecrets.name, name));
  return { value: row!.value, created: false };
}

/** Writes a copy of a shared secret into the data dir (mode 0600), for operators to read; returns its path. */
export function mirrorSecretFile(dataDir: string, fileName: string, value: string): string {
  const file = path.join(dataDir, fileName);
  if (readSecret(file) === value) return file;
  fs.renameSync(writeBeside(file, value), file);
  return file;
}

/**
 * A secret the configuration leaves out, generated once: in the data dir for one node (SQLite),
 * in the database for every node sharing it (PostgreSQL). `mirror`: operators must be able to
 * read it (the API key, the callbacks' signing secret), so a shared one is also copied into the
 * data dir; `file` is then where to read it.
 */
export async function loadOrCreateServiceSecret(opts: {
  database: Queryable;
  dataDir: string;
  name: string;
  now: number;
  mirror: boolean;
  /** Default base64url. */
  encode?: SecretEncoding;
}): Promise<{ value: string; file: string | undefined; created: boolean }> {
  if (opts.database.kind !== 'postgres') return loadOrCreateSecret(opts.dataDir, opts.name, 32, opts.encode);
  const shared = await loadOrCreateSharedSecret(opts.database, opts.name, opts.now, 32, opts.encode);
  return { ...shared, file: opts.mirror ? mirrorSecretFile(opts.dataDir, opts.name, shared.value) : undefined };
}
