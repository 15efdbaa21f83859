import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  CONFIG_DOC_FILE,
  describeKeys,
  renderConfigDoc,
  renderTable,
  spliceTable,
  TABLE_END,
  TABLE_START,
} from '../../scripts/config-doc.js';
import { ROOT } from '../support/service.js';

/**
 * docs/configuration.md's table of settings is generated from the configuration schema
 * (`npm run docs:config`) and committed: these tests fail when it is stale, when a key of the
 * schema has no description, and when the README's short table names a key that is gone or shows
 * another default than the schema's.
 */
const STALE = 'stale: run `npm run docs:config` and commit the result';

describe('docs/configuration.md', () => {
  it('holds the table generated from src/config.ts', async () => {
    const committed = await readFile(CONFIG_DOC_FILE, 'utf8');
    expect(committed, STALE).toBe(renderConfigDoc(committed));
  });

  it('describes every key of the schema', () => {
    const keys = describeKeys();
    expect(keys.length).toBeGreaterThan(40);
    const undescribed = keys.filter((key) => key.description === undefined).map((key) => key.name);
    expect(undescribed, 'add .describe() to these keys in src/config.ts').toEqual([]);
  });

  it('keeps the hand-written text around the table (control: a stale table is replaced, the rest is not)', () => {
    const page = `# Title\n\nBefore.\n\n${TABLE_START}\n| old | table |\n${TABLE_END}\n\nAfter.\n`;
    const table = renderTable(describeKeys());
    const updated = spliceTable(page, table);
    expect(updated).toBe(`# Title\n\nBefore.\n\n${TABLE_START}\n${table}\n${TABLE_END}\n\nAfter.\n`);
    expect(updated).not.toContain('| old | table |');
    expect(() => spliceTable('# No markers\n', table)).toThrow(/config-table:start/);
  });
});

describe('the generator', () => {
  it('finds descriptions and defaults inside .default(), .optional(), .transform() and .refine()', () => {
    const schema = z.object({
      OUTSIDE: z.coerce.number().int().default(3600).describe('Outermost.'),
      BEFORE_DEFAULT: z.coerce
        .number()
        .describe('Before .default().')
        .default(2 * 1024 ** 3),
      BEFORE_OPTIONAL: z.string().describe('Before .optional().').optional(),
      BEFORE_TRANSFORM: z
        .string()
        .default('')
        .describe('Before .transform().')
        .transform((value) => value.split(',')),
      BEFORE_REFINE: z
        .string()
        .default('x')
        .describe('Before .refine().')
        .refine(() => true),
      SHOWN: z.string().optional().meta({ description: 'With a default in words.', defaultText: 'generated' }),
      BARE: z.string().default('plain'),
    });
    expect(describeKeys(schema)).toEqual([
      { name: 'OUTSIDE', shownDefault: '`3600`', description: 'Outermost.' },
      { name: 'BEFORE_DEFAULT', shownDefault: '`2147483648`', description: 'Before .default().' },
      { name: 'BEFORE_OPTIONAL', shownDefault: 'unset', description: 'Before .optional().' },
      { name: 'BEFORE_TRANSFORM', shownDefault: 'empty', description: 'Before .transform().' },
      { name: 'BEFORE_REFINE', shownDefault: '`x`', description: 'Before .refine().' },
      { name: 'SHOWN', shownDefault: 'generated', description: 'With a default in words.' },
      { name: 'BARE', shownDefault: '`plain`', description: undefined },
    ]);
  });

  it('reads sizes and durations in units, and keeps a cell on one line without a column break', () => {
    const schema = z.object({
      CAP_BYTES: z.coerce
        .number()
        .default(50 * 1024 ** 3)
        .describe('A size.'),
      TTL_S: z.coerce
        .number()
        .default(24 * 3600)
        .describe('A time.'),
      ODD_BYTES: z.coerce.number().default(1000).describe('Not a binary unit.'),
      PIPE: z.string().default('a|b').describe('One | two\nlines.'),
    });
    expect(renderTable(describeKeys(schema)).split('\n').slice(2)).toEqual([
      '| `CAP_BYTES` | `53687091200` (50 GiB) | A size. |',
      '| `TTL_S` | `86400` (24 h) | A time. |',
      '| `ODD_BYTES` | `1000` | Not a binary unit. |',
      '| `PIPE` | `a\\|b` | One \\| two lines. |',
    ]);
  });
});

describe("the README's ten settings", () => {
  it('name keys of the schema, with the defaults docs/configuration.md shows', async () => {
    const readme = await readFile(path.join(ROOT, 'README.md'), 'utf8');
    const start = readme.indexOf('\n## The ten settings people change first\n');
    expect(start).toBeGreaterThan(0);
    const section = readme.slice(start, readme.indexOf('\n## ', start + 1));
    const rows = [...section.matchAll(/^\| `([A-Z][A-Z0-9_]*)` \| ([^|]+?) \|/gm)].map((match) => ({
      name: match[1]!,
      shownDefault: match[2]!,
    }));
    expect(rows).toHaveLength(10);
    const schema = new Map(describeKeys().map((key) => [key.name, key.shownDefault]));
    for (const row of rows) expect({ name: row.name, shownDefault: schema.get(row.name) }).toEqual(row);
  });
});
