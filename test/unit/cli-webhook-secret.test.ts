import { describe, expect, it } from 'vitest';
import { EXIT } from '../../src/cli/exit-codes.js';
import { runScriptedCli, type ScriptedAnswer } from '../support/scripted-cli.js';

/**
 * `source-fetch webhook-secret` against a scripted service: it asks getWebhookSecret with the key
 * and prints the secrets, one per line, nothing else. The real service is in
 * test/e2e/webhook-key-secrets.test.ts.
 */
const CURRENT = `whsec_${Buffer.alloc(32, 1).toString('base64')}`;
const PREVIOUS = `whsec_${Buffer.alloc(32, 2).toString('base64')}`;

/** The CLI with `argv`, the service answering `answer` (once). */
const run = (argv: string[], answer: ScriptedAnswer) => runScriptedCli(argv, [answer]);

describe('source-fetch webhook-secret', () => {
  it("prints the key's secrets, one per line, the current one first", async () => {
    const result = await run(['webhook-secret'], { status: 200, body: { secrets: [CURRENT, PREVIOUS] } });
    expect(result.code).toBe(EXIT.ok);
    expect(result.requests).toEqual([
      { method: 'GET', url: 'http://svc.test:8080/webhook-secret', authorization: 'Bearer k-0123456789abcdef' },
    ]);
    expect(result.stdout).toBe(`${CURRENT}\n${PREVIOUS}\n`);
    expect(result.stderr).toBe('');
  });

  it('exits 3 with the problem when the key is refused, printing no secret', async () => {
    const result = await run(['webhook-secret'], {
      status: 401,
      body: { code: 'unauthorized', detail: 'A valid API key is required.', status: 401, title: 'Unauthorized' },
    });
    expect(result.code).toBe(EXIT.refused);
    expect(result.stdout).toBe('');
    expect(result.stderr).toContain('401 unauthorized');
  });

  it('takes no argument nor option', async () => {
    for (const argv of [
      ['webhook-secret', 'extra'],
      ['webhook-secret', '--json'],
      ['webhook-secret', '-o', 'x'],
    ]) {
      const result = await run(argv, { status: 200, body: { secrets: [CURRENT] } });
      expect({ argv, code: result.code, requests: result.requests.length }).toEqual({
        argv,
        code: EXIT.usage,
        requests: 0,
      });
    }
  });
});
