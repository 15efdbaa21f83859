/**
 * The callback verification snippets of docs/webhooks.md, loaded as they are written, so
 * tests check callbacks the way a reader who copies one would: the one with the
 * `standardwebhooks` package, and the hand-written one with node:crypto alone.
 */
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { ROOT } from './service.js';

type Headers = Record<string, string | string[] | undefined>;
/** The hand-written snippet: true when the callback is signed by the secret and recent enough. */
export type VerifyWebhook = (
  secret: string,
  headers: Headers,
  rawBody: string | Buffer,
  toleranceS?: number,
) => boolean;
/** The package's snippet: the job record parsed from the body, or an exception. */
export type VerifiedJob = (secret: string, headers: Headers, rawBody: string | Buffer) => unknown;

/** The page's js blocks, by what they import. */
async function snippets(): Promise<{ library: string; handWritten: string }> {
  const page = await readFile(path.join(ROOT, 'docs/webhooks.md'), 'utf8');
  const blocks = [...page.matchAll(/^```js\n([\s\S]*?)^```$/gm)].map((match) => match[1]!);
  const library = blocks.filter((block) => block.includes("from 'standardwebhooks'"));
  const handWritten = blocks.filter((block) => block.includes("from 'node:crypto'"));
  if (blocks.length !== 2 || library.length !== 1 || handWritten.length !== 1) {
    throw new Error(
      `docs/webhooks.md must have 2 js blocks, one with standardwebhooks and one with node:crypto; it has ${blocks.length}`,
    );
  }
  return { library: library[0]!, handWritten: handWritten[0]! };
}

/**
 * Imports a snippet as a module and returns its export `name`. It is written under the project's
 * node_modules, so that its `import ... from 'standardwebhooks'` finds the package as it would in
 * a reader's project.
 */
async function load<T>(source: string, name: string): Promise<T> {
  const parent = path.join(ROOT, 'node_modules', '.cache');
  await mkdir(parent, { recursive: true });
  const dir = await mkdtemp(path.join(parent, 'webhook-snippet-'));
  try {
    const file = path.join(dir, 'snippet.mjs');
    await writeFile(file, source);
    const module = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
    if (typeof module[name] !== 'function') throw new Error(`the snippet exports no ${name}`);
    return module[name] as T;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

export async function documentedVerifyWebhook(): Promise<VerifyWebhook> {
  return load<VerifyWebhook>((await snippets()).handWritten, 'verifyWebhook');
}

export async function documentedVerifiedJob(): Promise<VerifiedJob> {
  return load<VerifiedJob>((await snippets()).library, 'verifiedJob');
}
