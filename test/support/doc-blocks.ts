/**
 * The shell blocks of a documentation page, as a reader copies them: the ```sh fences of one
 * section (from its heading to the next heading of the same or a higher level), in order. Tests
 * run them as written, so that the docs and what CI runs cannot drift apart.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { ROOT } from './service.js';

export function shellBlocks(markdown: string, heading: string): string[] {
  const lines = markdown.split('\n');
  const start = lines.indexOf(heading);
  if (start < 0) throw new Error(`no heading ${JSON.stringify(heading)}`);
  const level = /^#+/.exec(heading)![0].length;
  const blocks: string[] = [];
  let block: string[] | undefined;
  for (const line of lines.slice(start + 1)) {
    if (block === undefined) {
      const nextHeading = /^(#+) /.exec(line);
      if (nextHeading && nextHeading[1]!.length <= level) break;
      if (line === '```sh') block = [];
    } else if (line === '```') {
      blocks.push(block.join('\n'));
      block = undefined;
    } else {
      block.push(line);
    }
  }
  if (block !== undefined) throw new Error(`an unclosed shell block under ${JSON.stringify(heading)}`);
  return blocks;
}

/** A page of the repository (README.md, docs/operations.md, ...), read as it is checked in. */
export function readDoc(relativePath: string): string {
  return readFileSync(path.join(ROOT, relativePath), 'utf8');
}

/**
 * `text` with each `[from, to]` replaced everywhere; each `from` must occur, so that a change of
 * the docs that a test's replacement no longer fits fails loudly instead of running the original.
 */
export function relocate(text: string, replacements: Array<[string, string]>): string {
  let result = text;
  for (const [from, to] of replacements) {
    if (!result.includes(from)) throw new Error(`${JSON.stringify(from)} is not in:\n${text}`);
    result = result.replaceAll(from, to);
  }
  return result;
}
