import type { Config } from '../config.js';
import type { Database } from './database.js';
import { openPostgres } from './postgres.js';
import { openSqlite } from './sqlite.js';

/** The database the configuration names: PostgreSQL when DATABASE_URL is set, else SQLite in DATA_DIR. */
export async function openDatabase(config: Config['database'], nodeId: string): Promise<Database> {
  if (config.kind === 'postgres') return openPostgres(config.url, { poolSize: config.poolSize, applicationName: `source-fetch ${nodeId}` });
  return openSqlite(config.path);
}
