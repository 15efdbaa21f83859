import { execFile } from 'node:child_process';
import { cp, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';

/**
 * The hand-written migrations in drizzle/ and the schemas in src/db/schema/ describe the same
 * tables: drizzle-kit, asked to generate from the schema against a copy of the migrations and
 * their snapshots, finds nothing to add. A column added to a schema without its migration (or a
 * migration without its snapshot) fails here, not at a node's start.
 */
const run = promisify(execFile);
const repo = path.resolve(import.meta.dirname, '../..');
const drizzleKit = path.join(repo, 'node_modules/.bin/drizzle-kit');
const scratch = await mkdtemp(path.join(tmpdir(), 'sf-migrations-'));

afterAll(() => rm(scratch, { recursive: true, force: true }));

describe.each([
  { dialect: 'sqlite', schema: 'src/db/schema/sqlite.ts' },
  { dialect: 'postgresql', schema: 'src/db/schema/postgres.ts' },
])('the $dialect migrations', ({ dialect, schema }) => {
  const folder = dialect === 'postgresql' ? 'postgres' : 'sqlite';

  // drizzle-kit reads `--out` as relative to the working folder, whatever it is given.
  async function generate(out: string): Promise<string> {
    const relativeOut = path.relative(repo, out);
    const args = ['generate', '--dialect', dialect, '--schema', schema, '--out', relativeOut];
    const { stdout, stderr } = await run(drizzleKit, args, {
      cwd: repo,
      timeout: 60_000,
    });
    return stdout + stderr;
  }

  it('match the schema: generating from it adds no migration', async () => {
    const out = path.join(scratch, folder);
    await cp(path.join(repo, 'drizzle', folder), out, { recursive: true });
    const before = await readdir(out);
    const said = await generate(out);
    expect(await readdir(out)).toEqual(before);
    expect(said).toContain('No schema changes');
  }, 90_000);

  it('control: against no migrations at all, the same command writes one', async () => {
    const out = path.join(scratch, `${folder}-empty`);
    await generate(out);
    expect((await readdir(out)).filter((name) => name.endsWith('.sql'))).toHaveLength(1);
  }, 90_000);
});
