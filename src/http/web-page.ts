import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import type { OpenAPIHono } from '@hono/zod-openapi';
import type { AppEnv } from './env.js';

/**
 * The web page for people (docs/web-page.md): the files of one folder (web/ in the repository),
 * served at `/` (index.html) and `/web/{name}`, and the waveform component's module served from
 * its installed npm package at a path that names its version, `/vendor/wavesurfer.js@{version}/
 * wavesurfer.esm.js`, so that it can be cached as immutable. The files hold no data: no API key is
 * asked for them. They are read once at start and held in memory (a few tens of KiB).
 */
export interface WebFile {
  body: Uint8Array;
  contentType: string;
  etag: string;
  cacheControl: string;
}

/** URL path → file. */
export type WebFiles = ReadonlyMap<string, WebFile>;

const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.ico': 'image/x-icon',
};

/** The page's own files change with each release under the same names: revalidated on every use. */
const PAGE_CACHE_CONTROL = 'no-cache';
/** The vendor module's path names its version. */
const VENDOR_CACHE_CONTROL = 'public, max-age=31536000, immutable';

/**
 * Scripts only from this origin, no inline script, no plugins, no framing, data only from the
 * API (connect-src) and the artifacts (media-src; blob: for a WAV wavesurfer.js fetched to
 * decode). Inline styles are allowed because
 * wavesurfer.js writes its `<style>` into its shadow root, whose text depends on its options.
 */
export const WEB_PAGE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "media-src 'self' blob:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

/** The waveform module's file in its package (wavesurfer.js ships one ES module without imports). */
const WAVESURFER_MODULE = 'dist/wavesurfer.esm.js';

/**
 * Reads the page's folder (plain files only, by name) and the waveform package's module.
 * `wavesurferDir` is the installed package's folder (node_modules/wavesurfer.js).
 */
export async function loadWebFiles(webDir: string, wavesurferDir: string): Promise<WebFiles> {
  const files = new Map<string, WebFile>();
  const add = (urlPath: string, body: Uint8Array, contentType: string, cacheControl: string) =>
    files.set(urlPath, {
      body,
      contentType,
      cacheControl,
      etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 32)}"`,
    });
  for (const entry of await readdir(webDir, { withFileTypes: true })) {
    const type = CONTENT_TYPES[path.extname(entry.name)];
    if (!entry.isFile() || !type) continue;
    const body = await readFile(path.join(webDir, entry.name));
    add(`/web/${entry.name}`, body, type, PAGE_CACHE_CONTROL);
    if (entry.name === 'index.html') add('/', body, type, PAGE_CACHE_CONTROL);
  }
  const { version } = JSON.parse(await readFile(path.join(wavesurferDir, 'package.json'), 'utf8')) as {
    version: string;
  };
  add(
    `/vendor/wavesurfer.js@${version}/wavesurfer.esm.js`,
    await readFile(path.join(wavesurferDir, WAVESURFER_MODULE)),
    CONTENT_TYPES['.js']!,
    VENDOR_CACHE_CONTROL,
  );
  return files;
}

/** GET (and HEAD) of each file, answering If-None-Match with 304. */
export function registerWebPage(app: OpenAPIHono<AppEnv>, files: WebFiles): void {
  for (const [urlPath, file] of files) {
    app.get(urlPath, (c) => {
      const headers = {
        'content-type': file.contentType,
        'cache-control': file.cacheControl,
        etag: file.etag,
        'content-security-policy': WEB_PAGE_CSP,
        'x-content-type-options': 'nosniff',
        'referrer-policy': 'no-referrer',
      };
      const tags = c.req.header('if-none-match');
      if (tags && tags.split(',').some((tag) => tag.trim().replace(/^W\//, '') === file.etag))
        return c.body(null, 304, headers);
      return c.body(file.body as Uint8Array<ArrayBuffer>, 200, headers);
    });
  }
}
