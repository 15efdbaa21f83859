import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { describeKeys } from '../../scripts/config-doc.js';
import {
  CODES_END,
  CODES_START,
  ERROR_CODES_DOC_FILE,
  renderCodesTable,
  renderErrorCodesDoc,
  spliceCodesTable,
} from '../../scripts/error-codes-doc.js';
import { JOB_ERROR_CODES, JOB_ERRORS } from '../../src/job-errors.js';

/**
 * docs/api.md's table of job error codes is generated from src/job-errors.ts (`npm run
 * docs:errors`) and committed: these tests fail when it is stale, and when a setting an action
 * names is not one of the configuration's.
 */
const STALE = 'stale: run `npm run docs:errors` and commit the result';

describe("docs/api.md's job error codes", () => {
  it('hold the table generated from src/job-errors.ts', async () => {
    const committed = await readFile(ERROR_CODES_DOC_FILE, 'utf8');
    expect(committed, STALE).toBe(renderErrorCodesDoc(committed));
  });

  it('list every code once, with its sentence', () => {
    const table = renderCodesTable();
    for (const code of JOB_ERROR_CODES) {
      expect(table.split(`| \`${code}\` |`), code).toHaveLength(2);
      expect(table).toContain(`| \`${code}\` | ${JOB_ERRORS[code].sentence} |`);
    }
  });

  it('name only settings the configuration has', () => {
    const keys = new Set(describeKeys().map((key) => key.name));
    const named = JOB_ERROR_CODES.flatMap((code) => [...JOB_ERRORS[code].action.matchAll(/`([A-Z][A-Z0-9_]+)`/g)]);
    expect(named.length).toBeGreaterThan(5);
    expect(named.map((match) => match[1]).filter((name) => !keys.has(name!))).toEqual([]);
  });

  it('keep the hand-written text around the table (control: a stale table is replaced, the rest is not)', () => {
    const page = `# Title\n\nBefore.\n\n${CODES_START}\n| old | table |\n${CODES_END}\n\nAfter.\n`;
    const table = renderCodesTable({
      a_code: { family: 'limits', sentence: 'A sentence.', action: 'Do this.' },
    });
    expect(table).toBe(
      '**Limits**\n\n| Code | `message` | What to do |\n|---|---|---|\n| `a_code` | A sentence. | Do this. |',
    );
    const updated = spliceCodesTable(page, table);
    expect(updated).toBe(`# Title\n\nBefore.\n\n${CODES_START}\n${table}\n${CODES_END}\n\nAfter.\n`);
    expect(() => spliceCodesTable('# No markers\n', table)).toThrow(/job-error-codes:start/);
  });
});
