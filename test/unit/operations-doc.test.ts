import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../support/service.js';

/**
 * The operation tables of docs/api.md and README.md name every operation of openapi.json by its
 * operationId, and no other: an operation added to the contract and left out of the tables fails
 * here.
 */
const HTTP_METHODS = new Set(['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace']);

/** Every operationId of an OpenAPI document, sorted. */
function operationIds(document: { paths: Record<string, Record<string, { operationId?: string }>> }): string[] {
  const ids: string[] = [];
  for (const item of Object.values(document.paths))
    for (const [method, operation] of Object.entries(item))
      if (HTTP_METHODS.has(method) && operation.operationId) ids.push(operation.operationId);
  return ids.sort();
}

/** The first cells of the rows of the table whose header row starts with `| Operation |`. */
function tableOperations(markdown: string): string[] {
  const lines = markdown.split('\n');
  const header = lines.findIndex((line) => /^\| Operation \|/.test(line));
  if (header < 0) throw new Error('no table headed "| Operation |"');
  const names: string[] = [];
  for (const line of lines.slice(header + 2)) {
    if (!line.startsWith('|')) break;
    names.push(line.split('|')[1]!.trim());
  }
  return names.sort();
}

const document = JSON.parse(await readFile(path.join(ROOT, 'openapi.json'), 'utf8')) as Parameters<
  typeof operationIds
>[0];

describe('the operation tables', () => {
  it('openapi.json has operations to list', () => {
    expect(operationIds(document).length).toBeGreaterThan(5);
  });

  for (const file of ['docs/api.md', 'README.md'])
    it(`${file} lists every operationId of openapi.json, once, and no other`, async () => {
      const markdown = await readFile(path.join(ROOT, file), 'utf8');
      expect(tableOperations(markdown)).toEqual(operationIds(document));
    });

  it('a table that leaves an operation out is told apart (control)', () => {
    const table = '| Operation | Request | Answer |\n|---|---|---|\n| getJob | `GET /jobs/{id}` | 200 |\n\nAfter.\n';
    const contract = {
      paths: { '/jobs/{id}': { get: { operationId: 'getJob' } }, '/healthz': { get: { operationId: 'getHealth' } } },
    };
    expect(tableOperations(table)).toEqual(['getJob']);
    expect(tableOperations(table)).not.toEqual(operationIds(contract));
    expect(operationIds(contract)).toEqual(['getHealth', 'getJob']);
  });
});
