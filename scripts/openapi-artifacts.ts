/**
 * openapi.json and the TypeScript types generated from it (src/client/openapi-types.ts), made
 * from the same zod schemas that validate requests. The app is built with dependencies that are
 * never called: describing it touches no database or tool. Used by `npm run openapi:generate`
 * and by the test that fails when the committed files are stale.
 */
import path from 'node:path';
import openapiTS, { astToString } from 'openapi-typescript';
import { createApp } from '../src/app.js';
import { OPENAPI_DOCUMENT } from '../src/http/openapi.js';
import { createLogger } from '../src/logger.js';

const ROOT = path.resolve(import.meta.dirname, '..');
export const OPENAPI_JSON_FILE = path.join(ROOT, 'openapi.json');
export const OPENAPI_TYPES_FILE = path.join(ROOT, 'src/client/openapi-types.ts');

const unused = () => {
  throw new Error('not used while describing the API');
};

/** openapi.json's text. */
export function renderOpenApiJson(): string {
  const app = createApp({
    log: createLogger('silent'),
    admission: { validKey: unused, admit: unused, count: unused },
    // The contract is described apart from the operations that answer it.
    operations: [],
    bodies: { body: unused, send: unused },
    getJob: unused,
    getJobs: unused,
    jobEvents: { open: unused, head: unused, openCount: unused, closeAll: unused },
    // Static files are not part of the API's description.
    webFiles: new Map(),
  });
  return `${JSON.stringify(app.getOpenAPI31Document(OPENAPI_DOCUMENT), null, 2)}\n`;
}

/** The types file's text, for the given openapi.json text. */
export async function renderOpenApiTypes(openApiJson: string): Promise<string> {
  const nodes = await openapiTS(JSON.parse(openApiJson) as Parameters<typeof openapiTS>[0], { silent: true });
  const header = '// Generated from openapi.json by openapi-typescript: `npm run openapi:generate`. Do not edit.\n\n';
  return header + astToString(nodes);
}
