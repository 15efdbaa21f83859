/**
 * Read-only checks of a service's data dir for fault tests: every file stored at a content
 * address hashes to that address, the SQLite file passes integrity_check, and the rows that
 * refer to content.
 */
import { createHash } from 'node:crypto';
import { readFile, readdir } from 'node:fs/promises';
import path from 'node:path';
import Database from 'better-sqlite3';

export interface StoredFile {
  contentId: string;
  name: string;
  /** Lowercase hex SHA-256 of the file's bytes. */
  sha256: string;
  bytes: number;
}

/** Every file under <root>/<xx>/<cid>/ (the content addresses), hashed. */
export async function storedFiles(artifactRoot: string): Promise<StoredFile[]> {
  const files: StoredFile[] = [];
  const shards = (await readdir(artifactRoot).catch(() => [] as string[])).filter((e) => /^[0-9a-f]{2}$/.test(e));
  for (const shard of shards) {
    for (const cid of await readdir(path.join(artifactRoot, shard))) {
      for (const name of await readdir(path.join(artifactRoot, shard, cid))) {
        const bytes = await readFile(path.join(artifactRoot, shard, cid, name));
        files.push({ contentId: cid, name, sha256: createHash('sha256').update(bytes).digest('hex'), bytes: bytes.length });
      }
    }
  }
  return files;
}

export interface DbSnapshot {
  integrity: string;
  jobs: Array<{ id: string; status: string; error_code: string | null; content_id: string | null; attempts: number }>;
  cacheEntries: Array<{ content_id: string; name: string; bytes: number }>;
  aliases: Array<{ kind: string; key: string; content_id: string }>;
}

/** Opens the service's SQLite file read-only (WAL readers are fine next to a live writer). */
export function readDb(dataDir: string): DbSnapshot {
  const db = new Database(path.join(dataDir, 'source-fetch.sqlite'), { readonly: true, fileMustExist: true });
  try {
    return {
      integrity: String(db.pragma('integrity_check', { simple: true })),
      jobs: db.prepare('select id, status, error_code, content_id, attempts from jobs order by created_at').all() as DbSnapshot['jobs'],
      cacheEntries: db.prepare('select content_id, name, bytes from cache_entries').all() as DbSnapshot['cacheEntries'],
      aliases: db.prepare('select kind, key, content_id from aliases').all() as DbSnapshot['aliases'],
    };
  } finally {
    db.close();
  }
}
