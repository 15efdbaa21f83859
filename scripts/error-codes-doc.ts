/**
 * docs/api.md's table of job error codes, made from the closed list in src/job-errors.ts: each
 * code, the sentence a failed job's `error.message` carries, and what to do, grouped by family.
 * Used by `npm run docs:errors` and by the test that fails when the committed page is stale.
 *
 * The table sits between two marker comments; the page's hand-written text around it is kept.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { JOB_ERROR_FAMILIES, JOB_ERRORS } from '../src/job-errors.js';

const ROOT = path.resolve(import.meta.dirname, '..');
export const ERROR_CODES_DOC_FILE = path.join(ROOT, 'docs/api.md');
/** The start marker; the text after its first word may change, its first word may not. */
export const CODES_START =
  '<!-- job-error-codes:start (generated from src/job-errors.ts by `npm run docs:errors`: edit the list, not this table) -->';
export const CODES_END = '<!-- job-error-codes:end -->';
const START_PREFIX = '<!-- job-error-codes:start';

type Catalogue = Record<string, { family: keyof typeof JOB_ERROR_FAMILIES; sentence: string; action: string }>;

/** Text for one table cell: one line, no column break. */
function cell(text: string): string {
  return text.replace(/\s*\n\s*/g, ' ').replace(/\|/g, '\\|');
}

/** One table per family, in the list's order; the codes in each in the list's order too. */
export function renderCodesTable(catalogue: Catalogue = JOB_ERRORS): string {
  return Object.entries(JOB_ERROR_FAMILIES)
    .map(([family, title]) => {
      const rows = Object.entries(catalogue)
        .filter(([, entry]) => entry.family === family)
        .map(([code, entry]) => `| \`${code}\` | ${cell(entry.sentence)} | ${cell(entry.action)} |`);
      return rows.length === 0
        ? ''
        : [`**${title}**`, '', '| Code | `message` | What to do |', '|---|---|---|', ...rows].join('\n');
    })
    .filter((table) => table !== '')
    .join('\n\n');
}

/** `page` with the text between the markers replaced by `table`. */
export function spliceCodesTable(page: string, table: string): string {
  const start = page.indexOf(START_PREFIX);
  const startEnd = start < 0 ? -1 : page.indexOf('-->', start);
  const end = page.indexOf(CODES_END, startEnd);
  if (start < 0 || startEnd < 0 || end < 0) {
    throw new Error(
      `${path.relative(ROOT, ERROR_CODES_DOC_FILE)} must hold the table between ${START_PREFIX} ... --> and ${CODES_END}`,
    );
  }
  return `${page.slice(0, start)}${CODES_START}\n${table}\n${page.slice(end)}`;
}

/** docs/api.md as it should be: `page` (default: the committed one) with today's table. */
export function renderErrorCodesDoc(page: string = readFileSync(ERROR_CODES_DOC_FILE, 'utf8')): string {
  return spliceCodesTable(page, renderCodesTable());
}
