import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startNginx, type RunningNginx } from './nginx.js';
import { writeOfflineTools } from './offline-tools.js';
import { startService, type ServiceHandle } from './service.js';

export interface ApiBehindNginx {
  svc: ServiceHandle;
  nginx: RunningNginx;
  stop(): Promise<void>;
}

/**
 * The service with no workers (jobs stay queued; offline tools, so no tool could fetch anything),
 * no rate limit, and the repository's nginx in front of it on loopback: the front door alone.
 * `env` adds to or overrides that configuration.
 */
export async function startApiBehindNginx(env: Record<string, string> = {}): Promise<ApiBehindNginx> {
  const toolsDir = await mkdtemp(path.join(tmpdir(), 'api-behind-nginx-tools-'));
  const tools = await writeOfflineTools(toolsDir);
  const svc = await startService({
    env: {
      ...tools.env,
      WORKER_CONCURRENCY: '0',
      FETCH_ALLOW_HOSTS: '127.0.0.1:9',
      RATE_LIMIT_PER_MINUTE: '0',
      ACCEL_REDIRECT_PREFIX: '/_artifacts/',
      ...env,
    },
  });
  const nginx = await startNginx({ appPort: svc.port, artifactRoot: path.join(svc.dataDir, 'artifacts') });
  return {
    svc,
    nginx,
    async stop() {
      await nginx.stop();
      await svc.stop();
      await rm(toolsDir, { recursive: true, force: true });
    },
  };
}
