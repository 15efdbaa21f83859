/**
 * Writes openapi.json from the same zod schemas that validate requests. The app is built with
 * dependencies that are never called: generating the document touches no database or tool.
 * A test checks that the committed file equals what the running service serves.
 */
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { createApp, OPENAPI_INFO } from '../src/app.js';
import { createLogger } from '../src/logger.js';
import { createMetrics } from '../src/metrics.js';

const unused = () => {
  throw new Error('not used while generating the document');
};

const app = createApp({
  log: createLogger('silent'),
  checkKey: () => false,
  submitSource: unused,
  getJob: unused,
  cancelJob: unused,
  renderJob: unused,
  serveArtifact: unused,
  checkHealth: unused,
  metrics: createMetrics({ queueDepth: unused, busyWorkers: unused, storeTotals: unused, downloaderPresent: unused }),
});

const file = path.resolve(import.meta.dirname, '../openapi.json');
writeFileSync(file, `${JSON.stringify(app.getOpenAPI31Document(OPENAPI_INFO), null, 2)}\n`);
process.stdout.write(`wrote ${file}\n`);
