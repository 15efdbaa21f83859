import path from 'node:path';
import { SHARED_URL_SIGNING_SECRET, startNginx, type NginxOptions, type RunningNginx } from './nginx.js';
import { startService, type ServiceHandle } from './service.js';

type ServiceOptions = NonNullable<Parameters<typeof startService>[0]>;

/**
 * A service fronted by the repository's nginx as in production: nginx streams artifacts from the
 * service's artifact root (X-Accel-Redirect) and answers signed URLs alone, with the secret they
 * share. `env` adds to (or overrides) those settings; `nginx` passes the rest of nginx's options.
 */
export async function startServiceBehindNginx(
  options: ServiceOptions & { nginx?: Omit<NginxOptions, 'appPort' | 'artifactRoot' | 'urlSigningSecret'> } = {},
): Promise<{ svc: ServiceHandle; nginx: RunningNginx }> {
  const { nginx: nginxOptions, ...serviceOptions } = options;
  const svc = await startService({
    ...serviceOptions,
    env: {
      ACCEL_REDIRECT_PREFIX: '/_artifacts/',
      URL_SIGNING_SECRET: SHARED_URL_SIGNING_SECRET,
      ...serviceOptions.env,
    },
  });
  try {
    const nginx = await startNginx({
      ...nginxOptions,
      appPort: svc.port,
      artifactRoot: path.join(svc.dataDir, 'artifacts'),
      urlSigningSecret: SHARED_URL_SIGNING_SECRET,
    });
    return { svc, nginx };
  } catch (err) {
    await svc.stop();
    throw err;
  }
}
