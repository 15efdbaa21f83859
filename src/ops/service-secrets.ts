import { ConfigError } from '../config.js';
import type { Queryable } from '../db/database.js';
import type { Logger } from '../logger.js';
import { loadOrCreateServiceSecret, type SecretEncoding } from '../secrets.js';
import { splitWebhookSecrets, webhookSecretProblem, whsecOf } from '../webhooks/signature.js';
import type { ApiKeySource } from './welcome.js';

export interface ServiceSecrets {
  apiKeys: string[];
  /** Where the keys come from, for the words at start-up (./welcome.ts). */
  apiKeySource: ApiKeySource;
  urlSigningSecret: string;
  /** WEBHOOK_SECRET's value: the masters every key's callback signing secret is derived from (src/webhooks/key-secrets.ts). */
  webhookSecret: string;
}

/**
 * The service's secrets: those the configuration gives, and the others generated once and kept
 * (loadOrCreateServiceSecret). The generated webhook secret has the Standard Webhooks form
 * (whsec_); a kept file holding any secret WEBHOOK_SECRET accepts is used as it is, one it would
 * refuse stops start-up (ConfigError).
 */
export async function resolveServiceSecrets(opts: {
  configured: { apiKeys: string[]; urlSigningSecret?: string; webhookSecret?: string };
  database: Queryable;
  dataDir: string;
  now: number;
  log: Pick<Logger, 'info' | 'warn'>;
}): Promise<ServiceSecrets> {
  const generated = (name: string, mirror: boolean, encode?: SecretEncoding) =>
    loadOrCreateServiceSecret({ database: opts.database, dataDir: opts.dataDir, name, now: opts.now, mirror, encode });
  let apiKeys = opts.configured.apiKeys;
  let apiKeySource: ApiKeySource = { kind: 'configured' };
  if (apiKeys.length === 0) {
    const key = await generated('api-key', true);
    apiKeys = [key.value];
    // A generated key is mirrored into the data dir (`mirror`), so it always has a file.
    apiKeySource = { kind: 'file', file: key.file!, created: key.created };
    opts.log.warn(
      { file: key.file, created: key.created },
      'API_KEYS is not set: using the generated key kept in this file',
    );
  }
  const urlSigningSecret = opts.configured.urlSigningSecret ?? (await generated('url-signing-secret', false)).value;
  let webhookSecret = opts.configured.webhookSecret;
  if (webhookSecret === undefined) {
    const secret = await generated('webhook-secret', true, whsecOf);
    const problem = splitWebhookSecrets(secret.value)
      .map(webhookSecretProblem)
      .find((found) => found !== null);
    if (problem) throw new ConfigError(`Invalid webhook secret in ${secret.file ?? 'the database'}: ${problem}`);
    webhookSecret = secret.value;
    opts.log.info(
      { file: secret.file, created: secret.created },
      "WEBHOOK_SECRET is not set: each key's callback signing secret is derived from the generated one kept in this file",
    );
  }
  return { apiKeys, apiKeySource, urlSigningSecret, webhookSecret };
}
