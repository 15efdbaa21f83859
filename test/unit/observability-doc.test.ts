import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { ROOT } from '../support/service.js';

/**
 * docs/observability.md's Prometheus scrape job and PromQL queries, checked by promtool (Debian's
 * prometheus package): a reader who copies them gets a valid configuration and queries that parse.
 */
const run = promisify(execFile);
let dir: string;
let page: string;

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'observability-doc-'));
  page = await readFile(path.join(ROOT, 'docs/observability.md'), 'utf8');
});
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

function codeBlocks(language: string): string[] {
  return [...page.matchAll(new RegExp('^```' + language + '\\n([\\s\\S]*?)^```$', 'gm'))].map((match) => match[1]!);
}

async function promtool(...args: string[]): Promise<{ ok: boolean; output: string }> {
  try {
    const { stdout, stderr } = await run('promtool', args);
    return { ok: true, output: stdout + stderr };
  } catch (err) {
    const failed = err as { stdout?: string; stderr?: string };
    return { ok: false, output: `${failed.stdout ?? ''}${failed.stderr ?? ''}` };
  }
}

/** One recording rule per query, so that `promtool check rules` parses each. */
async function checkQueries(queries: string[], file: string) {
  const rules = {
    groups: [{ name: 'docs', rules: queries.map((expr, i) => ({ record: `docs_query_${i + 1}`, expr })) }],
  };
  await writeFile(path.join(dir, file), stringify(rules));
  return promtool('check', 'rules', path.join(dir, file));
}

describe("docs/observability.md's Prometheus examples", () => {
  it('the scrape job is a valid Prometheus configuration with bearer credentials', async () => {
    const [config] = codeBlocks('yaml').filter((block) => block.includes('scrape_configs:'));
    expect(config).toContain('type: Bearer');
    // The key file must exist for promtool; the page's path stands for the reader's own.
    const match = /credentials_file: (\S+)/.exec(config!);
    expect(match).not.toBeNull();
    const keyFile = path.join(dir, 'api-key');
    await writeFile(keyFile, 'a-key-for-the-check-only\n', { mode: 0o600 });
    await writeFile(path.join(dir, 'prometheus.yml'), config!.replace(match![1]!, keyFile));
    expect(await promtool('check', 'config', path.join(dir, 'prometheus.yml'))).toMatchObject({ ok: true });
  });

  it('every query parses (control: an unbalanced one does not)', async () => {
    const [block] = codeBlocks('promql');
    const queries = block!.split('\n').filter((line) => line.trim() !== '' && !line.startsWith('#'));
    expect(queries.length).toBeGreaterThanOrEqual(5);
    // Each names the service's metrics, or the standard process and Node.js ones.
    for (const query of queries) expect(query).toMatch(/\b(source_fetch|process|nodejs)_/);
    expect(await checkQueries(queries, 'queries.yml')).toMatchObject({ ok: true });

    const broken = await checkQueries(
      [...queries, 'sum by (code) (rate(source_fetch_job_failures_total[15m])'],
      'broken.yml',
    );
    expect(broken.ok).toBe(false);
    expect(broken.output).toContain('docs_query_');
  });
});
