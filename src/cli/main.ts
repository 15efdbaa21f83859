#!/usr/bin/env node
/**
 * The `source-fetch` command (`npx source-fetch`, through scripts/link-cli.sh): the composition root of the CLI, and nothing
 * else. The real argv, environment, output streams, working folder and Ctrl-C enter here.
 */
import { readFileSync } from 'node:fs';
import { runCli } from './commands.js';
import { EXIT } from './exit-codes.js';

const version = (
  JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }
).version;
const interrupt = new AbortController();
process.once('SIGINT', () => interrupt.abort());

const stdout = {
  isTTY: process.stdout.isTTY === true,
  get columns() {
    return process.stdout.columns;
  },
  write: (text: string) => void process.stdout.write(text),
};
const stderr = { write: (text: string) => void process.stderr.write(text) };

try {
  process.exitCode = await runCli({
    argv: process.argv.slice(2),
    env: process.env,
    stdout,
    stderr,
    cwd: process.cwd(),
    version,
    signal: interrupt.signal,
  });
} catch (err) {
  process.stderr.write(`source-fetch: unexpected error: ${(err as Error).stack ?? String(err)}\n`);
  process.exitCode = EXIT.unavailable;
}
