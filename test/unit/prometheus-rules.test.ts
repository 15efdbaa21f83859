import { execFile } from 'node:child_process';
import { copyFile, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { grafanaVariableSelector, metricNamesIn } from '../support/promql.js';
import { ROOT } from '../support/service.js';

/**
 * The alert rules in ops/prometheus, checked and unit-tested by promtool (Debian's prometheus
 * package), so that npm test, and so CI, runs `promtool test rules` on every change. Which metric
 * names the rules use is checked against a real service's /metrics in test/e2e/ops-metrics.test.ts.
 */
const run = promisify(execFile);
const DIR = path.join(ROOT, 'ops/prometheus');
const RULES = 'source-fetch.rules.yml';
const TESTS = 'source-fetch.rules.test.yml';

interface RuleFile {
  groups: Array<{ name: string; rules: Array<{ alert?: string; record?: string; expr: string; for?: string }> }>;
}
interface RuleTests {
  rule_files: string[];
  tests: Array<{ name: string; alert_rule_test?: Array<{ alertname: string; exp_alerts: unknown[] }> }>;
}

let scratch: string;
beforeAll(async () => {
  scratch = await mkdtemp(path.join(tmpdir(), 'prometheus-rules-'));
});
afterAll(async () => {
  if (scratch) await rm(scratch, { recursive: true, force: true });
});

async function promtool(cwd: string, ...args: string[]): Promise<{ ok: boolean; output: string }> {
  try {
    const { stdout, stderr } = await run('promtool', args, { cwd });
    return { ok: true, output: stdout + stderr };
  } catch (err) {
    const failed = err as { stdout?: string; stderr?: string };
    return { ok: false, output: `${failed.stdout ?? ''}${failed.stderr ?? ''}` };
  }
}

const alertsIn = (rules: RuleFile) =>
  rules.groups.flatMap((group) => group.rules.flatMap((rule) => (rule.alert ? [rule.alert] : [])));

describe('the alert rules (ops/prometheus)', () => {
  it('pass promtool check rules', async () => {
    const result = await promtool(DIR, 'check', 'rules', RULES);
    expect(result, result.output).toMatchObject({ ok: true });
    expect(result.output).toMatch(/SUCCESS: \d+ rules found/);
  });

  it('pass their promtool unit tests, in which every alert fires at least once', async () => {
    const result = await promtool(DIR, 'test', 'rules', TESTS);
    expect(result, result.output).toMatchObject({ ok: true });
    expect(result.output).toContain('SUCCESS');

    const rules = parse(await readFile(path.join(DIR, RULES), 'utf8')) as RuleFile;
    const tests = parse(await readFile(path.join(DIR, TESTS), 'utf8')) as RuleTests;
    expect(tests.rule_files).toEqual([RULES]);
    const fired = new Set(
      tests.tests.flatMap((test) =>
        (test.alert_rule_test ?? []).filter((t) => t.exp_alerts.length > 0).map((t) => t.alertname),
      ),
    );
    expect([...fired].sort()).toEqual(alertsIn(rules).sort());
  });

  it('fail their unit tests when a threshold changes (control: the tests can fail)', async () => {
    const rules = await readFile(path.join(DIR, RULES), 'utf8');
    const loosened = rules.replace(
      'nodejs_eventloop_lag_p99_seconds{job="source-fetch"} > 0.25',
      'nodejs_eventloop_lag_p99_seconds{job="source-fetch"} > 1',
    );
    expect(loosened).not.toBe(rules);
    await writeFile(path.join(scratch, RULES), loosened);
    await copyFile(path.join(DIR, TESTS), path.join(scratch, TESTS));
    const result = await promtool(scratch, 'test', 'rules', TESTS);
    expect(result.ok).toBe(false);
    expect(result.output).toContain('alertname: SourceFetchEventLoopLag');
  });

  it('select the scrape job the scrape configuration of docs/observability.md names', async () => {
    const docs = await readFile(path.join(ROOT, 'docs/observability.md'), 'utf8');
    const job = /^\s+- job_name: (\S+)$/m.exec(docs)?.[1];
    expect(job).toBe('source-fetch');
    const rules = await readFile(path.join(DIR, RULES), 'utf8');
    const jobs = new Set([...rules.matchAll(/\bjob="([^"]+)"/g)].map((match) => match[1]));
    expect([...jobs]).toEqual([job]);
  });

  it('are each listed in docs/observability.md', async () => {
    const docs = await readFile(path.join(ROOT, 'docs/observability.md'), 'utf8');
    const listed = [...docs.matchAll(/^\| `(SourceFetch\w+)` \|/gm)].map((match) => match[1]);
    const rules = parse(await readFile(path.join(DIR, RULES), 'utf8')) as RuleFile;
    expect(listed.sort()).toEqual(alertsIn(rules).sort());
  });
});

describe('metricNamesIn, which the e2e test compares with /metrics', () => {
  it.each([
    [
      'histogram_quantile(0.99, sum by (route, le) (rate(source_fetch_http_request_duration_seconds_bucket{route!~"/a/.+|b"}[5m]))) > 1',
      ['source_fetch_http_request_duration_seconds_bucket'],
    ],
    ['up{job="x"} == 0 and on (job) (count by (job) (up{job="x"} == 1) > 0)', ['up']],
    [
      'time() - source_fetch_downloader_release_timestamp_seconds > 90 * 86400',
      ['source_fetch_downloader_release_timestamp_seconds'],
    ],
    [
      'rate(process_cpu_seconds_total{job="$job", instance=~"$instance"}[$__rate_interval]) offset 1h',
      ['process_cpu_seconds_total'],
    ],
    [
      'max_over_time(count by (job) (up)[1h:1m]) / ignoring (code) group_left sum without (code) (a_total)',
      ['up', 'a_total'],
    ],
    ['1e3 * foo:bar_ratio unless bool_metric', ['foo:bar_ratio', 'bool_metric']],
  ])('%s', (expr, names) => {
    expect(metricNamesIn(expr)).toEqual(names);
  });

  it("reads a Grafana variable's label_values selector, not its label", () => {
    expect(
      metricNamesIn(grafanaVariableSelector('label_values(source_fetch_workers_busy{job="$job"}, instance)')),
    ).toEqual(['source_fetch_workers_busy']);
  });
});
