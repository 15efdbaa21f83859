import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import type { Database } from './database.js';
import { DEFAULT_CHECKPOINT_INTERVAL_MS } from './sqlite-checkpoints.js';
import { openPostgres } from './postgres.js';
import { openSqlite } from './sqlite.js';

/**
 * The database the configuration names: PostgreSQL when DATABASE_URL is set, else SQLite in
 * DATA_DIR, checkpointed in the background.
 */
export async function openDatabase(config: Config['database'], nodeId: string, log: Logger): Promise<Database> {
  if (config.kind === 'postgres') return openPostgres(config.url, { poolSize: config.poolSize, applicationName: `source-fetch ${nodeId}` });
  return openSqlite(config.path, {
    backgroundCheckpoints: {
      intervalMs: DEFAULT_CHECKPOINT_INTERVAL_MS,
      onError: (message) => log.error({ message }, 'SQLite checkpoints in the background stopped on an error: the WAL is checkpointed in COMMIT again, as SQLite does by default'),
    },
  });
}
