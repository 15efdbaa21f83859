import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

/**
 * The parts of src/ import one another one way. A part is a folder of src/ (src/jobs, with
 * src/jobs/fetch in it) or a file at its top (src/config.ts). The order below reads from the top
 * down: a part may import a part on its own row or any row under it, never one above. Parts on one
 * row do not import each other both ways either (no circle of parts at all). Nor do files, inside
 * one part too: no circle of files.
 *
 * The rows follow the way a request's data goes: the HTTP edge takes a submission and hands it to
 * the job service, whose URL policy checks it and whose queue holds it; a worker claims it and
 * runs the fetch with the tools inside the sandbox; the result goes into the store, its alias
 * makes the next submission born done, and delivery serves the file. Callbacks (src/webhooks)
 * read a job's end from the queue, so they sit above the jobs; the jobs get what they write of a
 * callback as a function (SubmitDeps.recordCallback), wired in src/main.ts.
 */
const LAYERS: readonly (readonly string[])[] = [
  // The composition root, and the CLI, a program of its own over the HTTP API.
  ['main.ts', 'cli'],
  // The app and the health check, served over HTTP.
  ['app.ts', 'health.ts'],
  // The HTTP edge: the API's operations and the two ways of dispatching to them.
  ['http'],
  // Artifact delivery's parts (paths, ranges, conditional requests, signed URLs, file bodies).
  ['delivery'],
  // Read once at start (config.ts), counted (metrics.ts), run at start and at shutdown (ops).
  ['config.ts', 'metrics.ts', 'ops'],
  ['webhooks'],
  ['jobs'],
  // What a job uses: the content store, the egress guard, the sandbox, the service's own secrets.
  ['store', 'egress', 'sandbox', 'secrets.ts'],
  // Audio analysis of a WAV's bytes (loudness, waveform peaks, their WebAssembly kernels): fed by the
  // fetch's conversion and the store's hash pass, it reads WAV headers with the tools' parser.
  ['audio'],
  // URL policy, the tools' argument builders and parsers, the database, the generated API types.
  ['policy', 'tools', 'db', 'client'],
  // Shared by all: claiming work while there is room, logging, the service's error type, the job's
  // and the API's error codes.
  ['claim-loop.ts', 'logger.ts', 'errors.ts', 'job-errors.ts', 'api-errors.ts'],
];

const SRC = path.resolve(import.meta.dirname, '../../src');

function sourceFiles(folder: string): string[] {
  return readdirSync(folder, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(folder, entry.name);
    if (entry.isDirectory()) return sourceFiles(full);
    return entry.name.endsWith('.ts') ? [full] : [];
  });
}

/** The part of src/ a file is in: its top folder, or the file itself at the top. */
function partOf(file: string): string {
  return path.relative(SRC, file).split(path.sep)[0]!;
}

interface Import {
  from: string;
  to: string;
  /** file -> file, for the failure's message. */
  where: string;
}

/** Every import of a file of src/ by a file of src/: static, dynamic, type-only and re-exports alike; paths from src/. */
function importsBetweenFiles(): Import[] {
  const found: Import[] = [];
  for (const file of sourceFiles(SRC)) {
    const { importedFiles } = ts.preProcessFile(readFileSync(file, 'utf8'), true, true);
    for (const { fileName } of importedFiles) {
      if (!fileName.startsWith('.')) continue;
      const target = path.resolve(path.dirname(file), fileName);
      if (!target.startsWith(SRC + path.sep)) continue;
      const [from, to] = [path.relative(SRC, file), path.relative(SRC, target.replace(/\.js$/, '.ts'))];
      found.push({ from, to, where: `${from} -> ${fileName}` });
    }
  }
  return found;
}

/** Every import of a file of src/ by another part. */
function importsBetweenParts(files: Import[]): Import[] {
  return files
    .map((i) => ({ ...i, from: partOf(path.join(SRC, i.from)), to: partOf(path.join(SRC, i.to)) }))
    .filter((i) => i.from !== i.to);
}

/** The graph of imports: each node and the nodes it imports. */
function graphOf(imports: Import[]): Map<string, Set<string>> {
  const edges = new Map<string, Set<string>>();
  for (const { from, to } of imports) edges.set(from, (edges.get(from) ?? new Set()).add(to));
  return edges;
}

/** Each circle with its arrows, node -> node, and one import that makes each. */
function describeCircles(imports: Import[]): string[] {
  return circles(graphOf(imports)).map((circle) => {
    const arrows = new Map<string, string>();
    for (const i of imports) {
      if (circle.includes(i.from) && circle.includes(i.to) && !arrows.has(`${i.from} -> ${i.to}`))
        arrows.set(`${i.from} -> ${i.to}`, i.where);
    }
    return [...arrows].map(([arrow, where]) => `${arrow} (${where})`).join('; ');
  });
}

/** The circles of a graph: its strongly connected components of more than one node, each sorted (Tarjan). */
function circles(edges: Map<string, Set<string>>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (node: string) => {
    index.set(node, index.size);
    low.set(node, index.get(node)!);
    stack.push(node);
    onStack.add(node);
    for (const next of edges.get(node) ?? []) {
      if (!index.has(next)) {
        visit(next);
        low.set(node, Math.min(low.get(node)!, low.get(next)!));
      } else if (onStack.has(next)) {
        low.set(node, Math.min(low.get(node)!, index.get(next)!));
      }
    }
    if (low.get(node) === index.get(node)) {
      const component: string[] = [];
      let member: string;
      do {
        member = stack.pop()!;
        onStack.delete(member);
        component.push(member);
      } while (member !== node);
      if (component.length > 1) found.push(component.sort());
    }
  };
  for (const node of edges.keys()) if (!index.has(node)) visit(node);
  return found;
}

describe('circles()', () => {
  it('finds a circle of a tiny graph, also inside a larger one, and nothing in a graph without', () => {
    const graph = (arrows: string[]) => graphOf(arrows.map((a) => ({ from: a[0]!, to: a[1]!, where: a })));
    expect(circles(graph(['ab', 'bc', 'ca', 'cd', 'de']))).toEqual([['a', 'b', 'c']]);
    expect(circles(graph(['ab', 'ba', 'bc', 'cd', 'dc']))).toEqual(
      expect.arrayContaining([
        ['a', 'b'],
        ['c', 'd'],
      ]),
    );
    expect(circles(graph(['ab', 'bc', 'ac', 'cd']))).toEqual([]);
  });
});

describe('imports between the files of src/', () => {
  const files = importsBetweenFiles();

  it('finds the imports it judges, inside a folder too', () => {
    expect(files.some((i) => i.from === 'jobs/fetch/task.ts' && i.to === 'jobs/fetch/step.ts')).toBe(true);
  });

  it('has no circle of files', () => {
    const found = circles(graphOf(files));
    const shown = describeCircles(files.filter((i) => found.some((c) => c.includes(i.from) && c.includes(i.to))));
    expect(shown).toEqual([]);
  });
});

describe('imports between the parts of src/', () => {
  const imports = importsBetweenParts(importsBetweenFiles());
  const rowOf = new Map(LAYERS.flatMap((row, i) => row.map((part) => [part, i] as const)));

  it('finds the imports it judges', () => {
    expect(imports.some((i) => i.from === 'jobs' && i.to === 'db')).toBe(true);
  });

  it('puts every part of src/ on a row of the order', () => {
    const parts = new Set(sourceFiles(SRC).map(partOf));
    expect([...parts].filter((part) => !rowOf.has(part)).sort()).toEqual([]);
    expect([...rowOf.keys()].filter((part) => !parts.has(part)).sort()).toEqual([]);
  });

  it('has no circle of parts', () => {
    expect(describeCircles(imports)).toEqual([]);
  });

  it('never imports a part on a row above', () => {
    const upward = imports
      .filter((i) => rowOf.has(i.from) && rowOf.has(i.to) && rowOf.get(i.to)! < rowOf.get(i.from)!)
      .map((i) => i.where);
    expect(upward).toEqual([]);
  });
});
