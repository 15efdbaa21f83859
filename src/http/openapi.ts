import type { OpenAPIHono } from '@hono/zod-openapi';

/**
 * OpenAPI 3.1's SPDX `identifier`, which the generator's types (OpenAPI 3.0's) do not know, hence
 * a variable rather than a literal. `LicenseRef-` is SPDX's form for a licence it does not list:
 * the project is not published under an open licence (package.json: UNLICENSED).
 */
const license = { name: 'Proprietary', identifier: 'LicenseRef-Proprietary' };

/**
 * The document-level parts of openapi.json (the operations come from the routes' zod contracts).
 * `servers` names the embedded defaults (HOST, PORT); a client given another base URL uses that.
 */
export const OPENAPI_DOCUMENT: Parameters<OpenAPIHono['getOpenAPI31Document']>[0] = {
  openapi: '3.1.0',
  info: {
    title: 'Source fetch service',
    version: '1.0.0',
    description:
      'Fetches the best audio of a URL as an asynchronous job, stores it as a content-addressed 44.1 kHz WAV, and serves it.',
    license,
  },
  servers: [
    {
      url: 'http://127.0.0.1:8080',
      description: 'The service on its defaults (HOST=127.0.0.1, PORT=8080), or nginx in front of it.',
    },
  ],
};
