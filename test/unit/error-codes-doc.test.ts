import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { describeKeys } from '../../scripts/config-doc.js';
import {
  API_CODES_END,
  API_CODES_START,
  CODES_END,
  CODES_START,
  ERROR_CODES_DOC_FILE,
  renderApiCodesTable,
  renderCodesTable,
  renderErrorCodesDoc,
  spliceApiCodesTable,
  spliceCodesTable,
} from '../../scripts/error-codes-doc.js';
import { API_ERROR_CODES, API_ERRORS, apiErrorStatus } from '../../src/api-errors.js';
import { JOB_ERROR_CODES, JOB_ERRORS } from '../../src/job-errors.js';

/**
 * docs/api.md's tables of API and job error codes are generated from src/api-errors.ts and
 * src/job-errors.ts (`npm run docs:errors`) and committed: these tests fail when one is stale,
 * and when a setting an action names is not one of the configuration's.
 */
const STALE = 'stale: run `npm run docs:errors` and commit the result';

describe("docs/api.md's API error codes", () => {
  it('hold the table generated from src/api-errors.ts', async () => {
    const committed = await readFile(ERROR_CODES_DOC_FILE, 'utf8');
    expect(committed, STALE).toBe(renderErrorCodesDoc(committed));
    expect(committed).toContain(`${API_CODES_START}\n${renderApiCodesTable()}\n${API_CODES_END}`);
  });

  it('list every code once, with its status and meaning', () => {
    const table = renderApiCodesTable();
    for (const code of API_ERROR_CODES) {
      expect(table.split(`| \`${code}\` |`), code).toHaveLength(2);
      expect(table).toContain(`| \`${code}\` | ${apiErrorStatus(code)} | ${API_ERRORS[code].meaning} |`);
    }
  });

  it('keep the hand-written text around the table (control: a stale table is replaced, the rest is not)', () => {
    const page = `# Title\n\n${API_CODES_START}\n| old |\n${API_CODES_END}\n\n${CODES_START}\n| jobs |\n${CODES_END}\n`;
    const table = renderApiCodesTable({ queue_full: { meaning: 'A | meaning.' } });
    expect(table).toBe('| Code | Status | Meaning |\n|---|---|---|\n| `queue_full` | 429 | A \\| meaning. |');
    expect(spliceApiCodesTable(page, table)).toBe(
      `# Title\n\n${API_CODES_START}\n${table}\n${API_CODES_END}\n\n${CODES_START}\n| jobs |\n${CODES_END}\n`,
    );
    expect(() => spliceApiCodesTable(`${CODES_START}\n${CODES_END}\n`, table)).toThrow(/api-error-codes:start/);
  });
});

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
