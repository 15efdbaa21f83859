import { describe, expect, it } from 'vitest';
import type { ScrubReport } from '../../src/cli/api.js';
import { EXIT } from '../../src/cli/exit-codes.js';
import { runScriptedCli, type ScriptedAnswer } from '../support/scripted-cli.js';

/**
 * `source-fetch scrub` against a scripted service: it asks for a pass (POST /store/scrub), follows
 * it on the same node while it runs (GET /store/scrub), prints the report, and exits by what the
 * pass found. The real service and CLI binary are in test/e2e/store-scrub.test.ts.
 */
const CID = 'ab'.repeat(32);
const OTHER = 'cd'.repeat(32);

const report = (overrides: Partial<ScrubReport>): ScrubReport => ({
  pass_id: 'p-1',
  node_id: 'node-a',
  trigger: 'request',
  status: 'done',
  started_at: '2026-01-01T00:00:00.000Z',
  finished_at: '2026-01-01T00:00:01.000Z',
  checked: 3,
  bytes_read: 3 * 1024 * 1024,
  corrupt: 0,
  moved: 0,
  missing: 0,
  unreadable: 0,
  findings: [],
  findings_omitted: 0,
  error: null,
  ...overrides,
});

/** `source-fetch scrub` with `argv`, the service answering `answers` in turn; its requests as `METHOD url`. */
async function scrub(argv: string[], answers: ScriptedAnswer[]) {
  const result = await runScriptedCli(['scrub', ...argv], answers);
  return { ...result, requests: result.requests.map(({ method, url }) => `${method} ${url}`) };
}

describe('source-fetch scrub', () => {
  it('control: a clean pass prints its counts and exits 0', async () => {
    const result = await scrub([], [{ status: 200, body: report({}) }]);
    expect(result.code).toBe(EXIT.ok);
    expect(result.requests).toEqual(['POST http://svc.test:8080/store/scrub?wait_s=25']);
    expect(result.stdout).toBe(
      'scrub p-1 on node-a: done: 3 checked, 3.0 MiB read; 0 corrupt (0 moved to the quarantine folder), 0 missing, 0 unreadable\n',
    );
  });

  it('follows a long pass on its node, then lists what it found and exits 7', async () => {
    const findings: ScrubReport['findings'] = [
      {
        content_id: CID,
        name: 'audio.wav',
        problem: 'corrupt',
        sha256: 'ef'.repeat(32),
        error: null,
        action: 'quarantined',
        quarantined_as: `${CID}.1700000000000/audio.wav`,
      },
      {
        content_id: OTHER,
        name: 'audio.wav',
        problem: 'unreadable',
        sha256: null,
        error: 'EIO',
        action: 'none',
        quarantined_as: null,
      },
    ];
    const result = await scrub(
      [],
      [
        { status: 202, body: report({ status: 'running', finished_at: null, checked: 1, bytes_read: 1024 }) },
        { status: 202, body: report({ status: 'running', finished_at: null, checked: 2, bytes_read: 2048 }) },
        { status: 200, body: report({ corrupt: 1, moved: 1, unreadable: 1, findings, findings_omitted: 0 }) },
      ],
    );
    expect(result.code).toBe(EXIT.storeProblems);
    expect(result.requests).toEqual([
      'POST http://svc.test:8080/store/scrub?wait_s=25',
      'GET http://svc.test:8080/store/scrub?wait_s=25',
      'GET http://svc.test:8080/store/scrub?wait_s=25',
    ]);
    expect(result.stdout.split('\n')).toEqual([
      'scrub p-1 on node-a: running, 1 checked, 1.0 KiB read',
      'scrub p-1 on node-a: running, 2 checked, 2.0 KiB read',
      'scrub p-1 on node-a: done: 3 checked, 3.0 MiB read; 1 corrupt (1 moved to the quarantine folder), 0 missing, 1 unreadable',
      `corrupt ${CID}/audio.wav: SHA-256 ${'ef'.repeat(32)}; quarantined as ${CID}.1700000000000/audio.wav`,
      `unreadable ${OTHER}/audio.wav: EIO`,
      '',
    ]);
  });

  it('--json prints the final report only', async () => {
    const final = report({
      corrupt: 1,
      findings: [
        {
          content_id: CID,
          name: 'audio.wav',
          problem: 'corrupt',
          sha256: 'ef'.repeat(32),
          error: null,
          action: 'deferred',
          quarantined_as: null,
        },
      ],
    });
    const result = await scrub(
      ['--json'],
      [
        { status: 202, body: report({ status: 'running' }) },
        { status: 200, body: final },
      ],
    );
    expect(result.code).toBe(EXIT.storeProblems);
    expect(JSON.parse(result.stdout)).toEqual(final);
  });

  it('a pass that failed or stopped exits 4 with its reason', async () => {
    const result = await scrub(
      [],
      [
        {
          status: 200,
          body: report({ status: 'failed', error: 'the pass stopped on an error (EMFILE); see the service log' }),
        },
      ],
    );
    expect(result.code).toBe(EXIT.unavailable);
    expect(result.stderr).toContain('scrub pass p-1 failed: the pass stopped on an error (EMFILE)');
  });

  it('another pass answered while following (another node behind a balancer) exits 4, naming the node to ask', async () => {
    const result = await scrub(
      [],
      [
        { status: 202, body: report({ status: 'running' }) },
        { status: 200, body: report({ pass_id: 'p-2', node_id: 'node-b' }) },
      ],
    );
    expect(result.code).toBe(EXIT.unavailable);
    expect(result.stderr).toContain('point SOURCE_FETCH_URL at the node that runs p-1');
  });

  it('a pass running on another node is a refusal (3)', async () => {
    const problem = {
      type: 'about:blank',
      title: 'Conflict',
      status: 409,
      detail: 'Node node-b is scrubbing the store.',
      code: 'scrub_running_elsewhere',
      node_id: 'node-b',
    };
    const result = await scrub([], [{ status: 409, body: problem }]);
    expect(result.code).toBe(EXIT.refused);
    expect(result.stderr).toContain('409 scrub_running_elsewhere: Node node-b is scrubbing the store.');
  });

  it.each([
    [['extra'], 'unexpected argument: extra'],
    [['-o', 'x'], '-o does not apply to scrub'],
  ])('%j is a usage error (2)', async (argv, message) => {
    const result = await scrub(argv, []);
    expect(result.code).toBe(EXIT.usage);
    expect(result.stderr).toContain(message);
  });
});
