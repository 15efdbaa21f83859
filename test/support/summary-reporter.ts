import type { Reporter, TestModule } from 'vitest/node';

/** How many of the slowest files the closing lines name. */
const SLOWEST_SHOWN = 12;

/**
 * Prints the slowest files (their tests' and hooks' time, with their project), then one plain
 * closing line ("N passed, N failed, N skipped") that CI can read: the suite's time is kept well
 * under its budget (docs/testing.md), and these lines say where it goes.
 */
export default class SummaryReporter implements Reporter {
  onTestRunEnd(testModules: ReadonlyArray<TestModule>): void {
    let passed = 0;
    let failed = 0;
    let skipped = 0;
    for (const mod of testModules) {
      for (const test of mod.children.allTests()) {
        const state = test.result().state;
        if (state === 'passed') passed++;
        else if (state === 'failed') failed++;
        else skipped++;
      }
      if (mod.state() === 'failed' && !mod.children.size) failed++;
    }
    const slowest = [...testModules]
      .map((mod) => ({
        seconds: mod.diagnostic().duration / 1000,
        name: `${mod.project.name}: ${mod.relativeModuleId}`,
      }))
      .sort((a, b) => b.seconds - a.seconds)
      .slice(0, SLOWEST_SHOWN);
    if (slowest.length > 0) {
      process.stdout.write('\nslowest files:\n');
      for (const { seconds, name } of slowest) process.stdout.write(`${seconds.toFixed(1).padStart(7)} s  ${name}\n`);
    }
    process.stdout.write(`\n${passed} passed, ${failed} failed, ${skipped} skipped\n`);
  }
}
