/**
 * docs/api.md's two tables of error codes, each made from its closed list: the API's (a problem
 * document's `code`, src/api-errors.ts: each code, its status and what it means) and the jobs'
 * (src/job-errors.ts: each code, the sentence a failed job's `error.message` carries, and what to
 * do, grouped by family). Used by `npm run docs:errors` and by the test that fails when the
 * committed page is stale.
 *
 * Each table sits between two marker comments; the page's hand-written text around it is kept.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { API_ERRORS, apiErrorStatus, type ApiErrorCode } from '../src/api-errors.js';
import { JOB_ERROR_FAMILIES, JOB_ERRORS } from '../src/job-errors.js';

const ROOT = path.resolve(import.meta.dirname, '..');
export const ERROR_CODES_DOC_FILE = path.join(ROOT, 'docs/api.md');
/** The start marker; the text after its first word may change, its first word may not. */
export const CODES_START =
  '<!-- job-error-codes:start (generated from src/job-errors.ts by `npm run docs:errors`: edit the list, not this table) -->';
export const CODES_END = '<!-- job-error-codes:end -->';
const START_PREFIX = '<!-- job-error-codes:start';
/** The API codes' markers, as the job codes'. */
export const API_CODES_START =
  '<!-- api-error-codes:start (generated from src/api-errors.ts by `npm run docs:errors`: edit the list, not this table) -->';
export const API_CODES_END = '<!-- api-error-codes:end -->';
const API_START_PREFIX = '<!-- api-error-codes:start';

interface Markers {
  start: string;
  startPrefix: string;
  end: string;
}
const JOB_MARKERS: Markers = { start: CODES_START, startPrefix: START_PREFIX, end: CODES_END };
const API_MARKERS: Markers = { start: API_CODES_START, startPrefix: API_START_PREFIX, end: API_CODES_END };

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

/** The API codes' table, in the list's order: each code, its status and its meaning. */
export function renderApiCodesTable(
  catalogue: Partial<Record<ApiErrorCode, { meaning: string }>> = API_ERRORS,
): string {
  const rows = (Object.entries(catalogue) as [ApiErrorCode, { meaning: string }][]).map(
    ([code, entry]) => `| \`${code}\` | ${apiErrorStatus(code)} | ${cell(entry.meaning)} |`,
  );
  return ['| Code | Status | Meaning |', '|---|---|---|', ...rows].join('\n');
}

/** `page` with the text between `markers` replaced by `table`. */
function splice(page: string, table: string, markers: Markers): string {
  const start = page.indexOf(markers.startPrefix);
  const startEnd = start < 0 ? -1 : page.indexOf('-->', start);
  const end = page.indexOf(markers.end, startEnd);
  if (start < 0 || startEnd < 0 || end < 0) {
    throw new Error(
      `${path.relative(ROOT, ERROR_CODES_DOC_FILE)} must hold the table between ${markers.startPrefix} ... --> and ${markers.end}`,
    );
  }
  return `${page.slice(0, start)}${markers.start}\n${table}\n${page.slice(end)}`;
}

/** `page` with the text between the job codes' markers replaced by `table`. */
export function spliceCodesTable(page: string, table: string): string {
  return splice(page, table, JOB_MARKERS);
}

/** `page` with the text between the API codes' markers replaced by `table`. */
export function spliceApiCodesTable(page: string, table: string): string {
  return splice(page, table, API_MARKERS);
}

/** docs/api.md as it should be: `page` (default: the committed one) with today's tables. */
export function renderErrorCodesDoc(page: string = readFileSync(ERROR_CODES_DOC_FILE, 'utf8')): string {
  return spliceApiCodesTable(spliceCodesTable(page, renderCodesTable()), renderApiCodesTable());
}
