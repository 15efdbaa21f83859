import { createRoute, z } from '@hono/zod-openapi';
import { jobKeyIdentity } from '../../jobs/key-identity.js';
import { apiKeySecurity as security, commonErrorResponses } from '../error-responses.js';
import type { KeyAdmission } from '../key-admission.js';
import { bindOperation, jsonAnswer, type OperationBinding } from '../operation.js';

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
export function webhookSecretOperation(deps: {
  admission: KeyAdmission;
  secretsOf: (keyIdentity: string) => readonly string[];
}): OperationBinding {
  return bindOperation(getWebhookSecretRoute, {
    answer(request) {
      const key = deps.admission.admit(request);
      const answer: WebhookSecretsRecord = { secrets: [...deps.secretsOf(jobKeyIdentity(key))] };
      return Promise.resolve(jsonAnswer(200, JSON.stringify(answer), { 'cache-control': 'no-store' }));
    },
  });
}
