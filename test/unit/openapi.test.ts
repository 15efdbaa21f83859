import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  OPENAPI_JSON_FILE,
  OPENAPI_TYPES_FILE,
  renderOpenApiJson,
  renderOpenApiTypes,
} from '../../scripts/openapi-artifacts.js';
import type { operations } from '../../src/client/openapi-types.js';
import { ROOT } from '../support/service.js';

/**
 * openapi.json and src/client/openapi-types.ts are generated (`npm run openapi:generate`) and
 * committed; these tests fail when either is stale, and when the document is not clean under
 * Redocly's recommended rules (run offline: redocly.yaml turns its telemetry off).
 */
const run = promisify(execFile);
const REDOCLY = path.join(ROOT, 'node_modules/@redocly/cli/bin/cli.js');
const STALE = 'stale: run `npm run openapi:generate` and commit the result';

interface LintReport {
  totals: { errors: number; warnings: number; ignored: number };
  problems: Array<{ ruleId: string; severity: string; message: string }>;
}

let committedJson: string;
let dir: string;

beforeAll(async () => {
  committedJson = await readFile(OPENAPI_JSON_FILE, 'utf8');
  dir = await mkdtemp(path.join(tmpdir(), 'openapi-lint-'));
});
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** `redocly lint` with the repository's configuration and ignore file, as JSON. */
async function lint(file: string, cwd: string): Promise<LintReport> {
  const env = { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' };
  const args = [REDOCLY, 'lint', file, '--format=json', `--config=${path.join(ROOT, 'redocly.yaml')}`];
  try {
    const { stdout } = await run(process.execPath, args, { cwd, env });
    return JSON.parse(stdout) as LintReport;
  } catch (err) {
    // A failed lint exits 1 and still prints its report.
    return JSON.parse((err as { stdout: string }).stdout) as LintReport;
  }
}

describe('openapi.json', () => {
  it('equals what the zod contracts generate', () => {
    expect(renderOpenApiJson(), STALE).toBe(committedJson);
  });

  it("is clean under Redocly's recommended rules, with servers, a licence and every operation's security", async () => {
    const report = await lint('openapi.json', ROOT);
    expect(report.problems).toEqual([]);
    expect(report.totals).toEqual({ errors: 0, warnings: 0, ignored: 1 });
    const document = JSON.parse(committedJson) as { servers?: unknown[]; info: { license?: { name: string } } };
    expect(document.servers?.length).toBeGreaterThan(0);
    expect(document.info.license?.name).toBeTruthy();
  });

  it('control: without servers and with an operation that declares no security, the lint fails', async () => {
    const document = JSON.parse(committedJson) as {
      servers?: unknown;
      paths: Record<string, { get?: { security?: unknown } }>;
    };
    delete document.servers;
    delete document.paths['/healthz']!.get!.security;
    await writeFile(path.join(dir, 'openapi.json'), JSON.stringify(document));
    const report = await lint('openapi.json', dir);
    const errors = report.problems.filter((problem) => problem.severity === 'error');
    expect(errors.map((problem) => problem.ruleId).sort()).toEqual(['no-empty-servers', 'security-defined']);
  });
});

describe('src/client/openapi-types.ts', () => {
  it('equals what openapi-typescript generates from openapi.json', async () => {
    expect(await renderOpenApiTypes(committedJson), STALE).toBe(await readFile(OPENAPI_TYPES_FILE, 'utf8'));
  });

  it('types every operation of the document (the type check fails for an id it lacks)', () => {
    const operationIds: Array<keyof operations> = [
      'getHealth',
      'getArtifact',
      'getMetrics',
      'submitSource',
      'submitSourceBatch',
      'getJob',
      'cancelJob',
      'listJobItems',
      'getJobEvents',
      'getEvents',
      'scrubStore',
      'getStoreScrub',
      'getWebhookSecret',
    ];
    const document = JSON.parse(committedJson) as { paths: Record<string, Record<string, { operationId: string }>> };
    const documented = Object.values(document.paths).flatMap((item) =>
      Object.values(item).map((operation) => operation.operationId),
    );
    expect(documented.sort()).toEqual([...operationIds].sort());
  });
});
