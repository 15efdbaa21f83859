import { getTableConfig as pgTableConfig, type PgTable } from 'drizzle-orm/pg-core';
import { getTableConfig as sqliteTableConfig, type SQLiteTable } from 'drizzle-orm/sqlite-core';
import { SQL } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import * as pg from '../../src/db/schema/postgres.js';
import * as sqlite from '../../src/db/schema/sqlite.js';

/**
 * The two schemas are one model: the repositories are written once, against the Postgres tables,
 * and run on the SQLite twins. Every table, column (name, kind of value, nullability, default),
 * primary key and index (columns, uniqueness, condition) must match.
 */
type Shape = Record<string, unknown>;

/** The kind of JavaScript value a column holds, whatever the database calls its type. */
function valueKind(column: { dataType: string; columnType: string }): string {
  if (column.columnType === 'SQLiteBoolean' || column.columnType === 'PgBoolean') return 'boolean';
  if (column.dataType === 'number') {
    return /Real|Double/.test(column.columnType) ? 'float' : 'integer';
  }
  return column.dataType;
}

function sqlText(where: SQL | undefined): string | null {
  if (!where) return null;
  return where.queryChunks
    .map((chunk) =>
      typeof chunk === 'object' && chunk !== null && 'value' in chunk
        ? (chunk as { value: string[] }).value.join('')
        : '',
    )
    .join('')
    .replace(/\s+/g, ' ')
    .trim();
}

function describeTable(config: {
  name: string;
  columns: Array<{
    name: string;
    dataType: string;
    columnType: string;
    notNull: boolean;
    hasDefault: boolean;
    primary: boolean;
  }>;
  primaryKeys: Array<{ columns: Array<{ name: string }> }>;
  indexes: Array<{ config: { name: string; columns: unknown[]; unique: boolean; where?: SQL } }>;
}): Shape {
  return {
    name: config.name,
    columns: Object.fromEntries(
      config.columns.map((column) => [
        column.name,
        {
          kind: valueKind(column),
          notNull: column.notNull,
          // SQLite's INTEGER PRIMARY KEY is the row id, which it fills when left out: a default of
          // its own that no code here relies on (store_totals always names its row).
          hasDefault: column.hasDefault && !(column.columnType === 'SQLiteInteger' && column.primary),
          primary: column.primary,
        },
      ]),
    ),
    primaryKeys: config.primaryKeys.map((key) => key.columns.map((column) => column.name)),
    indexes: Object.fromEntries(
      config.indexes.map(({ config: index }) => [
        index.name,
        {
          columns: index.columns.map((column) => (column as { name: string }).name),
          unique: index.unique,
          where: sqlText(index.where),
        },
      ]),
    ),
  };
}

const tablesOf = <T>(module: Record<string, unknown>, isTable: (value: unknown) => value is T) =>
  Object.entries(module).filter((entry): entry is [string, T] => isTable(entry[1]));

const pgTables = tablesOf(
  pg,
  (value): value is PgTable =>
    typeof value === 'object' && value !== null && Symbol.for('drizzle:IsDrizzleTable') in value,
);
const sqliteTables = tablesOf(
  sqlite,
  (value): value is SQLiteTable =>
    typeof value === 'object' && value !== null && Symbol.for('drizzle:IsDrizzleTable') in value,
);

describe('database schemas', () => {
  it('declare the same tables under the same names', () => {
    expect(pgTables.map(([name]) => name).sort()).toEqual(sqliteTables.map(([name]) => name).sort());
    expect(pgTables.length).toBeGreaterThanOrEqual(7);
  });

  it.each(pgTables.map(([name]) => name))('%s: same columns, keys and indexes', (name) => {
    const pgTable = pgTables.find(([key]) => key === name)![1];
    const sqliteTable = sqliteTables.find(([key]) => key === name)![1];
    const pgShape = describeTable(pgTableConfig(pgTable) as never);
    const sqliteShape = describeTable(sqliteTableConfig(sqliteTable));
    expect(sqliteShape).toEqual(pgShape);
  });

  it('would notice a difference: a column of another kind', () => {
    const jobs = describeTable(pgTableConfig(pg.jobs) as never) as { columns: Record<string, { kind: string }> };
    const changed = structuredClone(jobs);
    changed.columns.attempts!.kind = 'string';
    expect(changed).not.toEqual(describeTable(sqliteTableConfig(sqlite.jobs) as never));
  });
});
