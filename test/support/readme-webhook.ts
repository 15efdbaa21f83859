/**
 * The README's callback verification snippet (section Webhooks), loaded as it is written, so tests
 * check callbacks the way a reader who copies it would.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { ROOT } from './service.js';

export type VerifyWebhook = (secret: string, headers: Record<string, string | string[] | undefined>, rawBody: string | Buffer, toleranceS?: number) => boolean;

export async function readmeVerifyWebhook(): Promise<VerifyWebhook> {
  const readme = await readFile(path.join(ROOT, 'README.md'), 'utf8');
  const start = readme.indexOf('\n## Webhooks\n');
  if (start < 0) throw new Error('README.md has no Webhooks section');
  const section = readme.slice(start, readme.indexOf('\n## ', start + 1));
  const blocks = [...section.matchAll(/^```js\n([\s\S]*?)^```$/gm)].map((match) => match[1]!);
  if (blocks.length !== 1) throw new Error(`the Webhooks section has ${blocks.length} js blocks, not 1`);
  const dir = await mkdtemp(path.join(tmpdir(), 'readme-webhook-'));
  try {
    const file = path.join(dir, 'verify-webhook.mjs');
    await writeFile(file, blocks[0]!);
    const module = (await import(pathToFileURL(file).href)) as { verifyWebhook?: VerifyWebhook };
    if (typeof module.verifyWebhook !== 'function') throw new Error('the snippet exports no verifyWebhook');
    return module.verifyWebhook;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
