/**
 * Child process of the SQLite lock test (db-sqlite-lock.test.ts): opens the database as the
 * service does, prints "open", and keeps it open until it is killed.
 *
 *   node --import tsx test/unit/db-sqlite-holder.ts <database file>
 */
import { openSqlite } from '../../src/db/sqlite.js';

const [file] = process.argv.slice(2);
if (!file) throw new Error('usage: db-sqlite-holder.ts <database file>');
openSqlite(file);
process.stdout.write('open\n');
setInterval(() => {}, 60_000);
