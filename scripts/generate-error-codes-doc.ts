/** Writes docs/api.md's tables of API and job error codes from src/api-errors.ts and src/job-errors.ts (see error-codes-doc.ts). */
import { readFileSync, writeFileSync } from 'node:fs';
import { ERROR_CODES_DOC_FILE, renderErrorCodesDoc } from './error-codes-doc.js';

const before = readFileSync(ERROR_CODES_DOC_FILE, 'utf8');
const after = renderErrorCodesDoc(before);
if (after !== before) writeFileSync(ERROR_CODES_DOC_FILE, after);
process.stdout.write(`${after === before ? 'unchanged' : 'wrote'} ${ERROR_CODES_DOC_FILE}\n`);
