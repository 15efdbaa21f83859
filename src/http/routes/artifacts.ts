import type { OpenAPIHono } from '@hono/zod-openapi';
import { z } from '@hono/zod-openapi';
import type { AppEnv } from '../env.js';
import { problemResponseSpec } from '../error-responses.js';

const ArtifactParams = z.object({
  cid: z.string().openapi({ param: { name: 'cid', in: 'path' }, description: 'Content id: lowercase hex SHA-256 of the file.' }),
  name: z.string().openapi({ param: { name: 'name', in: 'path' }, example: 'audio.wav' }),
});

const SignatureQuery = z.object({
  expires: z.string().optional().openapi({ param: { name: 'expires', in: 'query' }, description: 'Expiry of a signed URL (Unix seconds).' }),
  sig: z.string().optional().openapi({ param: { name: 'sig', in: 'query' }, description: 'Signature of a signed URL.' }),
});

/**
 * getArtifact's contract. Its operation is src/delivery/artifact-operation.ts (it answers Range,
 * conditional requests and internal redirects itself), mounted for GET and HEAD with the others.
 */
export function registerArtifactContract(app: OpenAPIHono<AppEnv>): void {
  app.openAPIRegistry.registerPath({
    operationId: 'getArtifact',
    method: 'get',
    path: '/artifacts/{cid}/{name}',
    summary: 'A stored file. Needs the API key or a signed URL. Supports Range, If-None-Match, If-Range and HEAD.',
    security: [{ bearerAuth: [] }, { apiKeyHeader: [] }, {}],
    request: { params: ArtifactParams, query: SignatureQuery },
    responses: {
      200: { description: 'The file.', content: { 'audio/wav': { schema: { type: 'string', format: 'binary' } } } },
      206: { description: 'A byte range of the file.' },
      304: { description: 'Not modified.' },
      400: problemResponseSpec('Malformed content id or name.'),
      401: problemResponseSpec('No key and no signature.'),
      403: problemResponseSpec('Signature invalid or expired.'),
      404: problemResponseSpec('No such artifact.'),
      416: problemResponseSpec('Range not satisfiable.'),
    },
  });
}
