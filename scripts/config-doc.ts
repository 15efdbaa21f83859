/**
 * docs/configuration.md's table of settings, made from the configuration schema (src/config.ts):
 * each key's name, its default, and its description, all read from the schema. Used by
 * `npm run docs:config` and by the test that fails when the committed page is stale.
 *
 * The table sits between two marker comments; the page's hand-written text around it is kept.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { envSchema } from '../src/config.js';

const ROOT = path.resolve(import.meta.dirname, '..');
export const CONFIG_DOC_FILE = path.join(ROOT, 'docs/configuration.md');
/** The start marker; the text after its first word may change, its first word may not. */
export const TABLE_START =
  '<!-- config-table:start (generated from src/config.ts by `npm run docs:config`: edit the schema, not this table) -->';
export const TABLE_END = '<!-- config-table:end -->';
const START_PREFIX = '<!-- config-table:start';

export interface KeyDoc {
  name: string;
  /** The default as the table shows it: a value of the schema, or the key's `defaultText`. */
  shownDefault: string;
  /** Undefined when the key has none: the test fails then. */
  description: string | undefined;
}

type AnySchema = z.core.$ZodType;

/**
 * The schema a wrapper wraps: `.default()`, `.optional()` and the like make a new schema around
 * the key's, and `.transform()` a pipe whose input is the key's. Metadata set before a wrapper
 * stays on the wrapped schema, so it is looked for there too.
 */
function unwrap(schema: AnySchema): AnySchema | undefined {
  const def = schema._zod.def as { type: string; innerType?: AnySchema; in?: AnySchema };
  switch (def.type) {
    case 'default':
    case 'prefault':
    case 'optional':
    case 'nonoptional':
    case 'nullable':
    case 'readonly':
    case 'catch':
      return def.innerType;
    case 'pipe':
      return def.in;
    default:
      return undefined;
  }
}

/** The schema and every schema it wraps, outermost first. */
function layers(schema: AnySchema): AnySchema[] {
  const found: AnySchema[] = [];
  for (let at: AnySchema | undefined = schema; at !== undefined; at = unwrap(at)) found.push(at);
  return found;
}

/** A metadata field as set nearest the outside (`.describe()` is `.meta({ description })`). */
function metaField(schema: AnySchema, field: string): string | undefined {
  for (const layer of layers(schema)) {
    const value = z.globalRegistry.get(layer)?.[field];
    if (typeof value === 'string' && value.trim() !== '') return value.trim();
  }
  return undefined;
}

/** The value of the outermost `.default()`, if any. */
function schemaDefault(schema: AnySchema): { value: unknown } | undefined {
  for (const layer of layers(schema)) {
    const def = layer._zod.def as { type: string; defaultValue?: unknown };
    if (def.type === 'default' || def.type === 'prefault') {
      const value: unknown =
        typeof def.defaultValue === 'function' ? (def.defaultValue as () => unknown)() : def.defaultValue;
      return { value };
    }
  }
  return undefined;
}

const BINARY_UNITS: Array<[number, string]> = [
  [1024 ** 3, 'GiB'],
  [1024 ** 2, 'MiB'],
  [1024, 'KiB'],
];

/** A reading aid after a large number: bytes in binary units, whole hours of seconds. */
function inUnits(name: string, value: number): string {
  if (name.endsWith('_BYTES')) {
    const unit = BINARY_UNITS.find(([size]) => value >= size && value % size === 0);
    if (unit) return ` (${value / unit[0]} ${unit[1]})`;
  }
  if (name.endsWith('_S') && value >= 3600 && value % 3600 === 0) return ` (${value / 3600} h)`;
  return '';
}

function formatDefault(name: string, value: unknown): string {
  if (value === undefined) return 'unset';
  if (value === '') return 'empty';
  if (typeof value === 'number') return `\`${value}\`${inUnits(name, value)}`;
  if (typeof value === 'string' || typeof value === 'boolean') return `\`${String(value)}\``;
  return `\`${JSON.stringify(value)}\``;
}

/** Every key of the schema, in the schema's order. */
export function describeKeys(schema: z.ZodObject = envSchema): KeyDoc[] {
  return Object.entries(schema.shape as Record<string, AnySchema>).map(([name, key]) => {
    const found = schemaDefault(key);
    return {
      name,
      shownDefault: metaField(key, 'defaultText') ?? formatDefault(name, found?.value),
      description: metaField(key, 'description'),
    };
  });
}

/** Text for one table cell: one line, no column break. */
function cell(text: string): string {
  return text.replace(/\s*\n\s*/g, ' ').replace(/\|/g, '\\|');
}

export function renderTable(keys: KeyDoc[]): string {
  const rows = keys.map((key) => `| \`${key.name}\` | ${cell(key.shownDefault)} | ${cell(key.description ?? '')} |`);
  return ['| Variable | Default | What it does |', '|---|---|---|', ...rows].join('\n');
}

/** `page` with the text between the markers replaced by `table`. */
export function spliceTable(page: string, table: string): string {
  const start = page.indexOf(START_PREFIX);
  const startEnd = start < 0 ? -1 : page.indexOf('-->', start);
  const end = page.indexOf(TABLE_END, startEnd);
  if (start < 0 || startEnd < 0 || end < 0) {
    throw new Error(
      `${path.relative(ROOT, CONFIG_DOC_FILE)} must hold the table between ${START_PREFIX} ... --> and ${TABLE_END}`,
    );
  }
  return `${page.slice(0, start)}${TABLE_START}\n${table}\n${page.slice(end)}`;
}

/** docs/configuration.md as it should be: `page` (default: the committed one) with today's table. */
export function renderConfigDoc(page: string = readFileSync(CONFIG_DOC_FILE, 'utf8')): string {
  return spliceTable(page, renderTable(describeKeys()));
}
