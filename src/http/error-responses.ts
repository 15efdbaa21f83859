import { ProblemSchema } from './schemas.js';

/** Operations that need the API key accept it either way. */
export const apiKeySecurity: Array<Record<string, string[]>> = [{ bearerAuth: [] }, { apiKeyHeader: [] }];

/** Problem responses, declared once and spread into every route's contract. */
const problem = (description: string) => ({
  description,
  content: { 'application/problem+json': { schema: ProblemSchema } },
});

export const unauthorizedResponses = {
  401: problem('No valid API key.'),
  429: problem('Too many requests; see Retry-After.'),
} as const;

export const commonErrorResponses = {
  ...unauthorizedResponses,
  500: problem('Internal error.'),
} as const;

export { problem as problemResponseSpec };
