/**
 * `node dist/ops/backup-sqlite.js <database> <destination>`: an online backup of a node's SQLite
 * database while the service runs (src/db/sqlite-backup.ts; docs/backups.md says where it fits).
 * The composition root of that command, and nothing else: argv, output and exit status.
 */
import { backupSqlite } from '../db/sqlite-backup.js';

const USAGE =
  'usage: node dist/ops/backup-sqlite.js <database, e.g. $DATA_DIR/source-fetch.sqlite> <destination file>\n';

const [source, destination, ...rest] = process.argv.slice(2);
if (source === undefined || destination === undefined || rest.length > 0) {
  process.stderr.write(USAGE);
  process.exit(2);
}
try {
  const { pages, bytes } = await backupSqlite(source, destination);
  process.stdout.write(`backed up ${source} to ${destination}: ${pages} pages, ${bytes} bytes\n`);
} catch (err) {
  process.stderr.write(`backup-sqlite: ${(err as Error).message}\n`);
  process.exit(1);
}
