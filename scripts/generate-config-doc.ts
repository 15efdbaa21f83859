/** Writes the table of settings in docs/configuration.md from src/config.ts's schema (see config-doc.ts). */
import { readFileSync, writeFileSync } from 'node:fs';
import { CONFIG_DOC_FILE, describeKeys, renderConfigDoc } from './config-doc.js';

const undescribed = describeKeys()
  .filter((key) => key.description === undefined)
  .map((key) => key.name);
if (undescribed.length > 0) {
  process.stderr.write(
    `warning: no description in src/config.ts for ${undescribed.join(', ')}: add .describe() to each\n`,
  );
}
const before = readFileSync(CONFIG_DOC_FILE, 'utf8');
const after = renderConfigDoc(before);
if (after !== before) writeFileSync(CONFIG_DOC_FILE, after);
process.stdout.write(`${after === before ? 'unchanged' : 'wrote'} ${CONFIG_DOC_FILE}\n`);
