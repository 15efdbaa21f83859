import { realpathSync } from 'node:fs';
import path from 'node:path';
import { defineConfig } from 'vitest/config';
import { currentYtDlps } from './test/support/ytdlp-under-test.js';

/**
 * The end-to-end files that fetch through yt-dlp, run a second time with a current yt-dlp: the
 * formats, the egress guard and confinement around it, the operator's cookies, the job errors
 * read from yt-dlp's words, what the generic extractor says of a file and of a page (the
 * source's metadata), and what it lists of a feed, a playlist file and a page (a collection's listing).
 */
const FETCH_FILES = [
  'fetch-pipeline',
  'egress-guard',
  'confinement',
  'ytdlp-cookies',
  'job-errors',
  'source-metadata',
  'collection-listing',
].map((name) => `test/e2e/${name}.test.ts`);

export default defineConfig({
  test: {
    reporters: ['default', './test/support/summary-reporter.ts'],
    projects: [
      {
        test: {
          name: 'unit',
          include: ['test/unit/**/*.test.ts'],
          // Repository tests run on both databases: one PostgreSQL cluster for the unit run too.
          globalSetup: ['test/support/postgres-global.ts'],
          testTimeout: 20_000,
          // Hooks start PostgreSQL databases and make media fixtures with ffmpeg: on two busy cores
          // that can take longer than vitest's 10 s default. A guard against a hang, not a timing.
          hookTimeout: 60_000,
          // Both cores (vitest's default leaves one idle): most of these files wait on SQLite,
          // PostgreSQL or a child process rather than compute.
          maxWorkers: 2,
          // Projects with different maxWorkers must run as separate groups: unit tests first.
          sequence: { groupOrder: 0 },
        },
      },
      {
        test: {
          name: 'e2e',
          include: ['test/e2e/**/*.test.ts'],
          // SOURCE_FETCH_MANY_JOBS_PAGE=off (.ci/run's second Node): the hundred jobs in two browsers
          // (some 2.5 minutes) test the page's connections, which do not depend on the service's Node.
          exclude: process.env.SOURCE_FETCH_MANY_JOBS_PAGE === 'off' ? ['test/e2e/web-page-many-jobs.test.ts'] : [],
          globalSetup: ['test/support/build.ts', 'test/support/postgres-global.ts'],
          testTimeout: 120_000,
          hookTimeout: 120_000,
          // Two cores: end-to-end files each start a service, a media server and tools.
          maxWorkers: 2,
          sequence: { groupOrder: 1 },
        },
      },
      ...currentYtDlps().map((launcher) => ({
        test: {
          name: `e2e yt-dlp ${path.basename(path.dirname(realpathSync(launcher)))}`,
          include: FETCH_FILES,
          globalSetup: ['test/support/build.ts', 'test/support/postgres-global.ts'],
          // Read by test/support/ytdlp-under-test.ts: startService runs this launcher.
          env: { SOURCE_FETCH_TEST_YTDLP: realpathSync(launcher) },
          testTimeout: 120_000,
          hookTimeout: 120_000,
          maxWorkers: 2,
          // After the e2e project: both at once would be four services and their tools on two cores.
          sequence: { groupOrder: 2 },
        },
      })),
    ],
  },
});
