import { describe, expect, inject, it } from 'vitest';
import { freshDatabaseUrl, psql } from '../support/postgres.js';

describe("the e2e run's PostgreSQL cluster", () => {
  it('hands each caller its own empty database in the one cluster of the run', async () => {
    const first = await freshDatabaseUrl();
    const second = await freshDatabaseUrl();
    const admin = new URL(inject('postgresAdminUrl'));
    expect(admin.port).not.toBe('5432');
    for (const url of [first, second]) {
      expect(new URL(url).host).toBe(admin.host);
      expect(await psql(url, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`)).toBe('0');
    }
    expect(await psql(first, 'SELECT current_database()')).not.toBe(await psql(second, 'SELECT current_database()'));

    await psql(first, 'CREATE TABLE marker (note text)');
    expect(await psql(first, `SELECT to_regclass('marker') IS NOT NULL`)).toBe('t');
    expect(await psql(second, `SELECT to_regclass('marker') IS NULL`)).toBe('t');
  });
});
