import { appendFileSync, mkdtempSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createUsageLogReader } from '../../src/delivery/usage-log.js';

const A = 'a'.repeat(64);
const B = 'b'.repeat(64);

let dir: string;
let file: string;
let uses: Array<[string, number]>;
let malformed: number[];
let errors: string[];

beforeEach(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'sf-usage-log-'));
  file = path.join(dir, 'usage.log');
  uses = [];
  malformed = [];
  errors = [];
});

afterEach(() => rmSync(dir, { recursive: true, force: true }));

function reader(at = file) {
  return createUsageLogReader({
    file: at,
    onUse: (cid, atMs) => uses.push([cid, atMs]),
    onMalformed: (count) => malformed.push(count),
    onError: (err, action) => errors.push(`${action}:${err.code}`),
  });
}

describe('nginx usage log reader', () => {
  it('reports each line as a use at its time, then empties the file', () => {
    writeFileSync(file, `1795459194.417 ${A}\n1795459195.000 ${B}\n1795459196 ${A}\n`);
    const r = reader();
    expect(r.drain()).toBe(3);
    expect(uses).toEqual([
      [A, 1795459194417],
      [B, 1795459195000],
      [A, 1795459196000],
    ]);
    expect(statSync(file).size).toBe(0);
    // Lines appended after the truncation (nginx appends at the end) are read next time.
    appendFileSync(file, `1795459197.5 ${B}\n`);
    expect(r.drain()).toBe(1);
    expect(uses.at(-1)).toEqual([B, 1795459197500]);
  });

  it('keeps a line nginx has not finished for the next drain, and does not empty the file meanwhile', () => {
    writeFileSync(file, `1795459194.417 ${A}\n1795459195.000 ${B.slice(0, 20)}`);
    const r = reader();
    expect(r.drain()).toBe(1);
    expect(statSync(file).size).toBeGreaterThan(0);
    appendFileSync(file, `${B.slice(20)}\n`);
    expect(r.drain()).toBe(1);
    expect(uses.map(([cid]) => cid)).toEqual([A, B]);
    expect(statSync(file).size).toBe(0);
  });

  it('skips lines that are not "<time> <content id>" and says how many', () => {
    writeFileSync(file, `garbage\n1795459194 ${A.toUpperCase()}\n1795459194 ${A} extra\n1795459194 ${A}\n`);
    expect(reader().drain()).toBe(1);
    expect(uses).toEqual([[A, 1795459194000]]);
    expect(malformed).toEqual([3]);
  });

  it('reads a rotated file (another inode) from its start', () => {
    const r = reader();
    writeFileSync(file, `1 ${A}\n`);
    expect(r.drain()).toBe(1);
    // Rotation by rename: the old file moves away, nginx opens a new one after its reopen signal.
    renameSync(file, `${file}.1`);
    writeFileSync(file, `2 ${B}\n`);
    expect(r.drain()).toBe(1);
    expect(uses).toEqual([
      [A, 1000],
      [B, 2000],
    ]);
  });

  it('creates the file when it is missing, so that the app owns it', () => {
    expect(reader().drain()).toBe(0);
    expect(readFileSync(file, 'utf8')).toBe('');
    expect(errors).toEqual([]);
  });

  it('reports a folder that does not exist once, and reads nothing', () => {
    const r = reader(path.join(dir, 'missing', 'usage.log'));
    expect(r.drain()).toBe(0);
    expect(r.drain()).toBe(0);
    expect(errors).toEqual(['read:ENOENT']);
  });
});
