import { runCli, type CliDeps } from '../../src/cli/commands.js';

/** An answer of the scripted service: JSON, or a problem document from 400 on. */
export interface ScriptedAnswer {
  status: number;
  body: unknown;
}

export interface CliRequest {
  method: string;
  url: string;
  authorization: string | null;
}

/**
 * The CLI (src/cli/commands.ts) run with `argv` against a scripted service at
 * http://svc.test:8080 with key k-0123456789abcdef: its requests are answered with `answers` in
 * turn, one each, and fail once they run out. Its exit code, what it printed, and the requests it
 * made. Nothing leaves the process: the real service is the e2e tests'.
 */
export async function runScriptedCli(argv: string[], answers: ScriptedAnswer[]) {
  let stdout = '';
  let stderr = '';
  const requests: CliRequest[] = [];
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
      const answer = answers.shift();
      if (!answer) return Promise.reject(new Error('no more answers'));
      const type = answer.status >= 400 ? 'application/problem+json' : 'application/json';
      return Promise.resolve(
        new Response(JSON.stringify(answer.body), { status: answer.status, headers: { 'content-type': type } }),
      );
    },
  };
  return { code: await runCli(deps), stdout, stderr, requests };
}
