import { defineConfig } from 'vitest/config';

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
          // Projects with different maxWorkers must run as separate groups: unit tests first.
          sequence: { groupOrder: 0 },
        },
      },
      {
        test: {
          name: 'e2e',
          include: ['test/e2e/**/*.test.ts'],
          globalSetup: ['test/support/build.ts', 'test/support/postgres-global.ts'],
          testTimeout: 120_000,
          hookTimeout: 120_000,
          // Two cores: end-to-end files each start a service, a media server and tools.
          maxWorkers: 2,
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
