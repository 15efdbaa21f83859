import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { mkdtemp, rm, writeFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../support/service.js';

/**
 * Every relative link in README.md and docs/*.md leads to a file or folder of the repository, and
 * every `#anchor` into a markdown file to one of its headings, named as GitHub names them. Links
 * inside code (fenced blocks, `inline spans`) are not links; absolute URLs are not checked. And
 * every file path a comment of the code names is a file of the repository.
 */

/** The markdown files whose links are checked, relative to the root. */
function documents(root: string): string[] {
  const docs = path.join(root, 'docs');
  const pages = existsSync(docs)
    ? readdirSync(docs)
        .filter((name) => name.endsWith('.md'))
        .map((name) => `docs/${name}`)
    : [];
  return ['README.md', ...pages.sort()];
}

/** The text without fenced code blocks. */
function withoutFences(markdown: string): string {
  return markdown.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[ \t]*$/gm, '');
}

/** GitHub's anchor for a heading (github-slugger): lower case, punctuation dropped, spaces as dashes. */
function slug(heading: string): string {
  return heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/<[^>]*>/g, '')
    .replace(/[`*]/g, '')
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
    .replace(/ /g, '-');
}

/** Every anchor a markdown file's headings make, duplicates numbered as GitHub numbers them. */
function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const found = new Set<string>();
  for (const match of withoutFences(markdown).matchAll(/^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$/gm)) {
    const base = slug(match[1]!);
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    found.add(count === 0 ? base : `${base}-${count}`);
  }
  return found;
}

/** The targets of a markdown file's links: inline links and images, outside code. */
function linkTargets(markdown: string): string[] {
  const prose = withoutFences(markdown).replace(/`[^`]*`/g, 'code');
  return [...prose.matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)].map((match) => match[1]!);
}

/** "file: target (why)" for each link of `files` that leads nowhere. */
function brokenLinks(root: string, files: string[]): string[] {
  const broken: string[] = [];
  const anchorsOf = new Map<string, Set<string>>();
  const anchorsIn = (file: string) => {
    if (!anchorsOf.has(file)) anchorsOf.set(file, anchors(readFileSync(file, 'utf8')));
    return anchorsOf.get(file)!;
  };
  for (const file of files) {
    const source = path.join(root, file);
    for (const target of linkTargets(readFileSync(source, 'utf8'))) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue;
      const hash = target.indexOf('#');
      const pathPart = decodeURIComponent(hash < 0 ? target : target.slice(0, hash));
      const anchor = hash < 0 ? undefined : decodeURIComponent(target.slice(hash + 1));
      const resolved =
        pathPart === ''
          ? source
          : pathPart.startsWith('/')
            ? path.join(root, pathPart)
            : path.resolve(path.dirname(source), pathPart);
      if (path.relative(root, resolved).startsWith('..')) {
        broken.push(`${file}: ${target} (outside the repository)`);
      } else if (!existsSync(resolved)) {
        broken.push(`${file}: ${target} (no such file)`);
      } else if (
        anchor !== undefined &&
        resolved.endsWith('.md') &&
        statSync(resolved).isFile() &&
        !anchorsIn(resolved).has(anchor)
      ) {
        broken.push(`${file}: ${target} (no such heading)`);
      }
    }
  }
  return broken;
}

/** The folders whose files' comments are checked for the paths they name. */
const COMMENTED_FOLDERS = ['src', 'web', 'nginx', 'scripts', 'bench', 'ops', 'test/support'];
/** A path a comment names: from a top folder of the repository, or relative (./, ../). */
const NAMED_PATH =
  /(?<![\w/.-])((?:\.\.?\/)+|(?:src|test|docs|nginx|scripts|bench|web|ops|drizzle)\/)[\w./-]*\w\.(?:ts|js|md|sql|conf|lua|py|sh|json|html|css|template)\b/g;

/** The files under `folder`, relative to `root`, but for generated and binary ones. */
function sourceFiles(root: string, folder: string): string[] {
  const dir = path.join(root, folder);
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const relative = `${folder}/${entry.name}`;
    if (entry.isDirectory()) return entry.name === 'node_modules' ? [] : sourceFiles(root, relative);
    return /\.(ts|js|py|sh|conf|lua|template|html|css)$/.test(entry.name) ? [relative] : [];
  });
}

/**
 * "file:line: path" for each path a comment in `folders` names that is not in the repository. A
 * comment line starts with `*`, `//` or `#`; `.js` also stands for its `.ts` source.
 */
function missingCommentPaths(root: string, folders: string[]): string[] {
  const missing: string[] = [];
  for (const file of folders.flatMap((folder) => sourceFiles(root, folder))) {
    readFileSync(path.join(root, file), 'utf8')
      .split('\n')
      .forEach((line, index) => {
        if (!/^\s*(\*|\/\/|#)/.test(line)) return;
        for (const [named] of line.matchAll(NAMED_PATH)) {
          const resolved = named.startsWith('.')
            ? path.resolve(root, path.dirname(file), named)
            : path.join(root, named);
          if (!existsSync(resolved) && !existsSync(resolved.replace(/\.js$/, '.ts')))
            missing.push(`${file}:${index + 1}: ${named}`);
        }
      });
  }
  return missing;
}

describe('links in README.md and docs/', () => {
  it('lead to files that exist, and anchors to headings that exist', () => {
    const files = documents(ROOT);
    expect(files).toContain('docs/configuration.md');
    expect(brokenLinks(ROOT, files)).toEqual([]);
  });

  it('are checked: a missing file, a missing heading and a link out of the repository are reported (control)', async () => {
    const root = await mkdtemp(path.join(tmpdir(), 'docs-links-'));
    try {
      await mkdir(path.join(root, 'docs'));
      await writeFile(path.join(root, 'src.ts'), '');
      await writeFile(
        path.join(root, 'README.md'),
        [
          '# Title',
          '## What `FETCH_ALLOW_HOSTS` opens',
          '[ok](docs/a.md#a-heading-its-here) [ok](#what-fetch_allow_hosts-opens) [ok](src.ts) [ok](https://example.org/x)',
          '[gone](docs/gone.md) [no heading](docs/a.md#not-there) [out](../elsewhere.md)',
          '`[in code](docs/gone.md)`',
          '```',
          '[in a block](docs/gone.md)',
          '```',
        ].join('\n'),
      );
      await writeFile(
        path.join(root, 'docs/a.md'),
        "# A\n\n## A heading: it's here\n\n[up](../README.md#title) [self](#a)\n",
      );
      expect(brokenLinks(root, documents(root))).toEqual([
        'README.md: docs/gone.md (no such file)',
        'README.md: docs/a.md#not-there (no such heading)',
        'README.md: ../elsewhere.md (outside the repository)',
      ]);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });

  it('name headings as GitHub does', () => {
    expect(slug('A current yt-dlp')).toBe('a-current-yt-dlp');
    expect(slug("Confinement: a tool sees its job's folder")).toBe('confinement-a-tool-sees-its-jobs-folder');
    expect(slug('Its age, in /healthz')).toBe('its-age-in-healthz');
    expect(slug('compose: the monitoring profile')).toBe('compose-the-monitoring-profile');
    expect(slug('Delivery: at least once')).toBe('delivery-at-least-once');
    expect(anchors('# Notes\n\n## Notes\n\n```\n# not a heading\n```\n')).toEqual(new Set(['notes', 'notes-1']));
  });
});

describe('paths named in comments of the code', () => {
  it('are files of the repository', () => {
    expect(sourceFiles(ROOT, 'src')).toContain('src/main.ts');
    expect(missingCommentPaths(ROOT, COMMENTED_FOLDERS)).toEqual([]);
  });

  it('are checked: a comment naming a file that is gone is reported, code is not (control)', async () => {
    const root = await mkdtemp(path.join(tmpdir(), 'comment-paths-'));
    try {
      await mkdir(path.join(root, 'src/http'), { recursive: true });
      await writeFile(path.join(root, 'src/http/here.ts'), '');
      await writeFile(
        path.join(root, 'src/http/a.ts'),
        [
          "import { x } from './gone.js';",
          '/**',
          ' * Uses ./here.ts and ./here.js, src/http/here.ts, ../http/here.ts; not ./gone.ts',
          ' */',
          '// nor src/delivery/handler.ts',
        ].join('\n'),
      );
      await writeFile(path.join(root, 'src/http/b.sh'), '# see docs/nowhere.md\n');
      expect(missingCommentPaths(root, ['src'])).toEqual([
        'src/http/a.ts:3: ./gone.ts',
        'src/http/a.ts:5: src/delivery/handler.ts',
        'src/http/b.sh:1: docs/nowhere.md',
      ]);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });
});
