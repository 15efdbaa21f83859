import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { exportedNames, grafanaVariableSelector, metricNamesIn } from '../support/promql.js';
import { ROOT, startService, type ServiceHandle } from '../support/service.js';
import { startWebhookReceiver, type WebhookReceiver } from '../support/webhook-receiver.js';

/**
 * ops/: every metric the alert rules and the Grafana dashboard query is one a real service's
 * /metrics exports, and the metrics made for them (callback attempts by result, the downloader's
 * release date) count what happened.
 */
let svc: ServiceHandle;
let media: MediaServer;
let receiver: WebhookReceiver;

beforeAll(async () => {
  media = await startMediaServer();
  receiver = await startWebhookReceiver();
  svc = await startService({
    env: { FETCH_ALLOW_HOSTS: '127.0.0.1', WEBHOOK_RETRY_BASE_S: '0.2', WEBHOOK_TIMEOUT_S: '2' },
  });
});
afterAll(async () => {
  await svc?.stop();
  await receiver?.close();
  await media?.close();
});

async function scrape(): Promise<string> {
  const res = await svc.request('/metrics');
  expect(res.status).toBe(200);
  return res.text();
}

interface Dashboard {
  panels: Array<{ type: string; title: string; targets?: Array<{ expr: string }> }>;
  templating: { list: Array<{ name: string; type: string; query: string | { query: string } }> };
}

/** Every PromQL query of the dashboard: its panels' targets and its variables' label_values selectors. */
async function dashboardQueries(): Promise<Array<{ where: string; expr: string }>> {
  const dashboard = JSON.parse(
    await readFile(path.join(ROOT, 'ops/grafana/source-fetch.dashboard.json'), 'utf8'),
  ) as Dashboard;
  const panels = dashboard.panels.flatMap((panel) =>
    (panel.targets ?? []).map((target) => ({ where: `panel "${panel.title}"`, expr: target.expr })),
  );
  const variables = dashboard.templating.list
    .filter((variable) => variable.type === 'query')
    .map((variable) => ({
      where: `variable $${variable.name}`,
      expr: grafanaVariableSelector(typeof variable.query === 'string' ? variable.query : variable.query.query),
    }));
  return [...panels, ...variables];
}

async function ruleQueries(): Promise<Array<{ where: string; expr: string }>> {
  const rules = parse(await readFile(path.join(ROOT, 'ops/prometheus/source-fetch.rules.yml'), 'utf8')) as {
    groups: Array<{ rules: Array<{ alert: string; expr: string }> }>;
  };
  return rules.groups.flatMap((group) =>
    group.rules.map((rule) => ({ where: `alert ${rule.alert}`, expr: rule.expr })),
  );
}

/** The names each query reads that `exported` lacks, but those in `besides`. */
function unknownNames(
  queries: Array<{ where: string; expr: string }>,
  exported: Set<string>,
  besides: string[] = [],
): string[] {
  return queries.flatMap(({ where, expr }) =>
    metricNamesIn(expr)
      .filter((name) => !exported.has(name) && !besides.includes(name))
      .map((name) => `${where}: ${name}`),
  );
}

describe('ops/ against a real /metrics', () => {
  it('every query of the Grafana dashboard names metrics the service exports (control: a name it does not export is caught)', async () => {
    const exported = exportedNames(await scrape());
    const queries = await dashboardQueries();
    expect(queries.length).toBeGreaterThan(25);
    expect(queries.filter(({ expr }) => metricNamesIn(expr).length === 0)).toEqual([]);
    expect(unknownNames(queries, exported)).toEqual([]);
    // The dashboard reads the standard Node.js names, and the check would catch the prefixed ones.
    expect(queries.some(({ expr }) => metricNamesIn(expr).includes('process_resident_memory_bytes'))).toBe(true);
    const prefixed = [{ where: 'control', expr: 'source_fetch_process_resident_memory_bytes{job="$job"}' }];
    expect(unknownNames(prefixed, exported)).toEqual(['control: source_fetch_process_resident_memory_bytes']);
  });

  it("every alert rule names metrics the service exports, or Prometheus's own `up`", async () => {
    const exported = exportedNames(await scrape());
    const queries = await ruleQueries();
    expect(unknownNames(queries, exported, ['up'])).toEqual([]);
    // `up` is the scrape's: the service exports no series of that name.
    expect(exported.has('up')).toBe(false);
    expect(unknownNames(queries, exported)).toContain('alert SourceFetchNodeDown: up');
  });

  it('exports the release date the downloader names, as /healthz shows it', async () => {
    const health = (await (await svc.request('/healthz', { auth: false })).json()) as {
      downloader: { version: string; released_on: string };
    };
    expect(health.downloader.released_on).toMatch(/^\d{4}-\d{2}-\d{2}$/);
    const lines = (await scrape())
      .split('\n')
      .filter((line) => line.startsWith('source_fetch_downloader_release_timestamp_seconds'));
    expect(lines).toEqual([
      `source_fetch_downloader_release_timestamp_seconds{version="${health.downloader.version}"} ${Date.parse(health.downloader.released_on) / 1000}`,
    ]);
  });

  it('counts callback attempts by result: a 503, then the 2xx that delivers (control: none before the first attempt)', async () => {
    const count = async (result: string) =>
      Number(
        / (\S+)$/.exec(
          (await scrape())
            .split('\n')
            .find((line) => line.startsWith(`source_fetch_callback_attempts_total{result="${result}"}`)) ?? ' 0',
        )![1],
      );
    expect(await count('5xx')).toBe(0);
    expect(await count('2xx')).toBe(0);
    receiver.script(503);
    const res = await svc.request('/sources', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ url: media.url('/ops/missing.flac'), callback_url: receiver.url('/ops') }),
    });
    expect(res.status).toBe(202);
    const requests = await receiver.waitForRequests(2, 60_000);
    expect(requests.map((request) => request.answer)).toEqual([503, 200]);
    // The attempt is counted once its answer is in: the receiver sees it a moment before.
    await expect.poll(() => count('2xx'), { timeout: 10_000 }).toBe(1);
    expect(await count('5xx')).toBe(1);
    expect(await count('2xx')).toBe(1);
  });
});
