/**
 * A real database for unit and end-to-end tests, of either kind the service runs on:
 *
 *   describe.each(BACKENDS)('job queue on %s', (kind) => {
 *     const database = await openTestDatabase(kind);   // SQLite in a temp folder, or a fresh
 *   });                                                // database of the run's PostgreSQL cluster
 *
 * `serviceEnv(kind)` gives what startService() needs to run the service on that kind.
 */
import { mkdtemp } from 'node:fs/promises';
import path from 'node:path';
import { inject } from 'vitest';
import type { Database, DatabaseKind } from '../../src/db/database.js';
import { openPostgres } from '../../src/db/postgres.js';
import { openSqlite } from '../../src/db/sqlite.js';
import type { NewCacheEntry } from '../../src/store/cache-entries.js';
import { freshDatabaseUrl } from './postgres.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The run's folder for SQLite test databases, removed when the run ends (test/support/postgres-global.ts). */
    sqliteTestDir: string;
  }
}

export const BACKENDS: readonly DatabaseKind[] = ['sqlite', 'postgres'];

export interface TestDatabase extends Database {
  /** The SQLite file, or the PostgreSQL URL: for tests that look underneath (query plans, say). */
  readonly location: string;
}

export async function openTestDatabase(kind: DatabaseKind): Promise<TestDatabase> {
  if (kind === 'postgres') {
    const url = await freshDatabaseUrl();
    return Object.assign(await openPostgres(url, { poolSize: 5 }), { location: url });
  }
  const file = path.join(await mkdtemp(path.join(inject('sqliteTestDir'), 'sf-db-')), 'db.sqlite');
  return Object.assign(openSqlite(file), { location: file });
}

/** Environment for a service on `kind`: SQLite in its data dir needs nothing; PostgreSQL a fresh database. */
export async function serviceEnv(kind: DatabaseKind): Promise<Record<string, string>> {
  return kind === 'postgres' ? { DATABASE_URL: await freshDatabaseUrl() } : {};
}

/** A stored WAV's cache row (one second of 44.1 kHz stereo, 100 bytes) for recordCacheEntry(). */
export function wavEntry(contentId: string, overrides: Partial<NewCacheEntry> = {}): NewCacheEntry {
  return {
    contentId,
    name: 'audio.wav',
    kind: 'source_wav',
    bytes: 100,
    contentType: 'audio/wav',
    sampleRate: 44100,
    channels: 2,
    durationS: 1,
    ...overrides,
  };
}
