import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import { jobKeyIdentity } from '../../jobs/key-identity.js';
import type { AppEnv } from '../env.js';
import { apiKeySecurity as security, commonErrorResponses } from '../error-responses.js';
import type { KeyAdmission } from '../key-admission.js';

export const WebhookSecretsSchema = z
  .object({
    secrets: z
      .array(z.string().openapi({ example: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwdC2+K1mj3Cc=' }))
      .min(1)
      .openapi({
        description:
          "This key's signing secrets, Standard Webhooks' `whsec_` form, the current one first: one per secret the service signs with (more than one while it rotates them). A callback carries a signature for each.",
      }),
  })
  .openapi('WebhookSecrets');

export type WebhookSecretsRecord = z.infer<typeof WebhookSecretsSchema>;

export const getWebhookSecretRoute = createRoute({
  operationId: 'getWebhookSecret',
  method: 'get',
  path: '/webhook-secret',
  summary: "The secrets that sign the callbacks of this key's jobs, for its receivers to verify them.",
  description: [
    "Each API key has secrets of its own, derived from the service's: a callback verifies under the secret of the key",
    "that submitted its job, and under no other key's, so a receiver that holds only its key's secret can tell that a",
    'callback is about a job of that key. Answered with `Cache-Control: no-store`.',
  ].join(' '),
  security,
  responses: {
    200: {
      description: "This key's signing secrets.",
      content: { 'application/json': { schema: WebhookSecretsSchema } },
    },
    ...commonErrorResponses,
  },
});

/** getWebhookSecret: the presenting key's secrets (src/webhooks/key-secrets.ts), never another key's. */
export function registerWebhookSecretRoute(
  app: OpenAPIHono<AppEnv>,
  deps: { admission: KeyAdmission; secretsOf: (keyIdentity: string) => readonly string[] },
): void {
  app.openapi(getWebhookSecretRoute, (c) => {
    const key = deps.admission.admit({ header: (name) => c.req.header(name) });
    const answer: WebhookSecretsRecord = { secrets: [...deps.secretsOf(jobKeyIdentity(key))] };
    return c.json(answer, 200, { 'Cache-Control': 'no-store' });
  });
}
