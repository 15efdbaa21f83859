import type { Logger } from '../logger.js';
import type { Database } from './database.js';
import { DEFAULT_CHECKPOINT_INTERVAL_MS } from './sqlite-checkpoints.js';
import { openPostgres } from './postgres.js';
import { openSqlite } from './sqlite.js';

/** Which database to open: PostgreSQL shared by every node, or SQLite in a file of one node's. */
export type DatabaseChoice = { kind: 'postgres'; url: string; poolSize: number } | { kind: 'sqlite'; path: string };

/**
 * The database the configuration names (src/config.ts: PostgreSQL when DATABASE_URL is set, else
 * SQLite in DATA_DIR), SQLite checkpointed in the background.
 */
export async function openDatabase(choice: DatabaseChoice, nodeId: string, log: Logger): Promise<Database> {
  if (choice.kind === 'postgres')
    return openPostgres(choice.url, { poolSize: choice.poolSize, applicationName: `source-fetch ${nodeId}` });
  return openSqlite(choice.path, {
    backgroundCheckpoints: {
      intervalMs: DEFAULT_CHECKPOINT_INTERVAL_MS,
      onError: (message) =>
        log.error(
          { message },
          'SQLite checkpoints in the background stopped on an error: the WAL is checkpointed in COMMIT again, as SQLite does by default',
        ),
    },
  });
}
