import { describe, expect, it } from 'vitest';
import path from 'node:path';
import type { HealthReport } from '../../src/http/schemas.js';
import { cannotFetchText } from '../../src/health.js';
import { welcomeText } from '../../src/ops/welcome.js';

describe('the words at start-up', () => {
  it('name the page to open and the file of a generated key, resolved, never a key', () => {
    const text = welcomeText({
      address: '127.0.0.1',
      port: 8080,
      keys: { kind: 'file', file: 'data/api-key', created: true },
      behindNginx: false,
    });
    const file = path.resolve('data/api-key');
    expect(text).toBe(
      'source-fetch is ready: open http://127.0.0.1:8080/ in a browser.\n' +
        `The API key was generated into ${file} (read it with: cat ${file}); the page asks for it once per tab.\n`,
    );
    expect(
      welcomeText({ address: '127.0.0.1', port: 1, keys: { kind: 'file', file, created: false }, behindNginx: false }),
    ).toContain(`The API key is in ${file} `);
  });

  it('open a wildcard address as localhost and an IPv6 one in brackets; behind nginx, point there', () => {
    const configured = { kind: 'configured' } as const;
    expect(welcomeText({ address: '0.0.0.0', port: 8080, keys: configured, behindNginx: true })).toBe(
      'source-fetch is ready: open http://localhost:8080/ in a browser.\n' +
        "Behind nginx, open nginx's address instead.\n" +
        'The API key is one of API_KEYS; the page asks for it once per tab.\n',
    );
    expect(welcomeText({ address: '::', port: 80, keys: configured, behindNginx: false })).toContain(
      'http://localhost:80/',
    );
    expect(welcomeText({ address: '::1', port: 80, keys: configured, behindNginx: false })).toContain(
      'http://[::1]:80/',
    );
  });

  describe('when the first health check finds the node cannot fetch or store', () => {
    const healthy: HealthReport = {
      status: 'ok',
      can_fetch: true,
      downloader: {
        present: true,
        path: '/usr/bin/yt-dlp',
        version: '2026.10.26',
        released_on: '2026-10-26',
        age_days: 1,
        outdated: false,
      },
      ffmpeg: { present: true, path: '/usr/bin/ffmpeg', version: 'ffmpeg version 5.1' },
      node_id: 'n',
      database: { ok: true, kind: 'sqlite' },
      artifact_root: { writable: true, free_bytes: 10, min_free_bytes: 1, can_store: true, stored_bytes: 0 },
      confinement: { mode: 'netns', ok: true, reason: null },
      warnings: [],
    };
    const settings = { ytdlp: 'yt-dlp', ffmpeg: 'ffmpeg', artifactRoot: '/d/artifacts' };

    it('say nothing when it can', () => {
      expect(cannotFetchText(healthy, settings)).toBeNull();
    });

    it('say each thing it lacks, with what to do', () => {
      const text = cannotFetchText(
        {
          ...healthy,
          status: 'unavailable',
          can_fetch: false,
          downloader: { ...healthy.downloader, present: false, path: '/opt/yt-dlp', version: null },
          confinement: { mode: 'netns', ok: false, reason: 'unshare: operation not permitted' },
          database: { ok: false, kind: 'postgres' },
          artifact_root: { ...healthy.artifact_root, writable: false },
        },
        settings,
      );
      expect(text).toBe(
        [
          'It cannot fetch yet (GET /healthz says so too):',
          '  yt-dlp at /opt/yt-dlp does not run (its --version failed): set YTDLP_PATH to a working one.',
          '  The tools cannot be confined to the egress guard (unshare: operation not permitted): see docs/threat-model.md; TOOL_CONFINEMENT=off runs them unconfined.',
          '  The database does not answer.',
          '  The artifact root /d/artifacts is not writable.',
          '',
        ].join('\n'),
      );
    });

    it('a volume short of room: it takes no job yet, and the warning says why', () => {
      const text = cannotFetchText(
        {
          ...healthy,
          status: 'degraded',
          warnings: [{ code: 'store_low_on_space', message: 'The volume has 5 bytes free.' }],
        },
        settings,
      );
      expect(text).toBe('It takes no job yet (GET /healthz says so too):\n  The volume has 5 bytes free.\n');
    });
  });
});
