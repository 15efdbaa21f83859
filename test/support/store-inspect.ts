/**
 * Read-only checks of a service's store for fault tests: every file stored at a content address
 * hashes to that address, the database is sound (SQLite: integrity_check; either: the store's
 * totals equal the sum of its rows), and the rows that refer to content.
 */
import { createHash } from 'node:crypto';
import { readFile, readdir } from 'node:fs/promises';
import path from 'node:path';
import Database from 'better-sqlite3';
import postgres from 'postgres';

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
        files.push({
          contentId: cid,
          name,
          sha256: createHash('sha256').update(bytes).digest('hex'),
          bytes: bytes.length,
        });
      }
    }
  }
  return files;
}

export interface DbSnapshot {
  /** SQLite's integrity_check ('ok'); PostgreSQL has no such check: null. */
  integrity: string | null;
  /** store_totals equals the count and the sum of bytes of cache_entries. */
  totalsConsistent: boolean;
  jobs: Array<{ id: string; status: string; error_code: string | null; content_id: string | null; attempts: number }>;
  cacheEntries: Array<{ content_id: string; name: string; bytes: number }>;
  aliases: Array<{ kind: string; key: string; content_id: string }>;
}

const JOBS = 'select id, status, error_code, content_id, attempts from jobs order by created_at';
const ENTRIES = 'select content_id, name, bytes from cache_entries';
const ALIASES = 'select kind, key, content_id from aliases';
const TOTALS = 'select bytes, artifacts from store_totals where id = 1';

/**
 * The service's database, read-only: its PostgreSQL database when `databaseUrl` is given, else the
 * SQLite file in `dataDir` (WAL readers are fine next to a live writer).
 */
export async function readDb(dataDir: string, databaseUrl?: string): Promise<DbSnapshot> {
  if (databaseUrl) {
    const sql = postgres(databaseUrl, { max: 1, onnotice: () => {} });
    try {
      const [jobs, cacheEntries, aliases, totals] = await Promise.all([
        sql.unsafe(JOBS),
        sql.unsafe(ENTRIES),
        sql.unsafe(ALIASES),
        sql.unsafe(TOTALS),
      ]);
      const entries = cacheEntries.map((row) => ({
        ...row,
        bytes: Number(row.bytes),
      })) as unknown as DbSnapshot['cacheEntries'];
      return {
        integrity: null,
        totalsConsistent: consistent(entries, totals[0] as { bytes: unknown; artifacts: unknown } | undefined),
        jobs: jobs as unknown as DbSnapshot['jobs'],
        cacheEntries: entries,
        aliases: aliases as unknown as DbSnapshot['aliases'],
      };
    } finally {
      await sql.end();
    }
  }
  const db = new Database(path.join(dataDir, 'source-fetch.sqlite'), { readonly: true, fileMustExist: true });
  try {
    const cacheEntries = db.prepare(ENTRIES).all() as DbSnapshot['cacheEntries'];
    return {
      integrity: String(db.pragma('integrity_check', { simple: true })),
      totalsConsistent: consistent(
        cacheEntries,
        db.prepare(TOTALS).get() as { bytes: number; artifacts: number } | undefined,
      ),
      jobs: db.prepare(JOBS).all() as DbSnapshot['jobs'],
      cacheEntries,
      aliases: db.prepare(ALIASES).all() as DbSnapshot['aliases'],
    };
  } finally {
    db.close();
  }
}

function consistent(
  entries: DbSnapshot['cacheEntries'],
  totals: { bytes: unknown; artifacts: unknown } | undefined,
): boolean {
  const bytes = entries.reduce((sum, row) => sum + row.bytes, 0);
  return Number(totals?.bytes ?? 0) === bytes && Number(totals?.artifacts ?? 0) === entries.length;
}
