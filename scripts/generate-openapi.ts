/** Writes openapi.json and src/client/openapi-types.ts (see openapi-artifacts.ts). */
import { writeFileSync } from 'node:fs';
import { OPENAPI_JSON_FILE, OPENAPI_TYPES_FILE, renderOpenApiJson, renderOpenApiTypes } from './openapi-artifacts.js';

const json = renderOpenApiJson();
writeFileSync(OPENAPI_JSON_FILE, json);
process.stdout.write(`wrote ${OPENAPI_JSON_FILE}\n`);
writeFileSync(OPENAPI_TYPES_FILE, await renderOpenApiTypes(json));
process.stdout.write(`wrote ${OPENAPI_TYPES_FILE}\n`);
