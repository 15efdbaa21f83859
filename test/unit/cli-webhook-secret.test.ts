import { describe, expect, it } from 'vitest';
import { runCli, type CliDeps } from '../../src/cli/commands.js';
import { EXIT } from '../../src/cli/exit-codes.js';

/**
 * `source-fetch webhook-secret` against a scripted service: it asks getWebhookSecret with the key
 * and prints the secrets, one per line, nothing else. The real service is in
 * test/e2e/webhook-key-secrets.test.ts.
 */
const CURRENT = `whsec_${Buffer.alloc(32, 1).toString('base64')}`;
const PREVIOUS = `whsec_${Buffer.alloc(32, 2).toString('base64')}`;

async function run(argv: string[], answer: { status: number; body: unknown }) {
  let stdout = '';
  let stderr = '';
  const requests: Array<{ method: string; url: string; authorization: string | null }> = [];
  const deps: CliDeps = {
    argv,
    env: { SOURCE_FETCH_API_KEY: 'k-0123456789abcdef', SOURCE_FETCH_URL: 'http://svc.test:8080' },
    stdout: { isTTY: false, write: (text) => (stdout += text) },
    stderr: { write: (text) => (stderr += text) },
    cwd: '/tmp',
    version: '9.9.9',
    signal: new AbortController().signal,
    fetch: (input, init) => {
      requests.push({
        method: init?.method ?? 'GET',
        url: input instanceof Request ? input.url : input.toString(),
        authorization: new Headers(init?.headers).get('authorization'),
      });
      const type = answer.status >= 400 ? 'application/problem+json' : 'application/json';
      return Promise.resolve(
        new Response(JSON.stringify(answer.body), { status: answer.status, headers: { 'content-type': type } }),
      );
    },
  };
  return { code: await runCli(deps), stdout, stderr, requests };
}

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
