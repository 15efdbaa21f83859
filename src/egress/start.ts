import fs from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from '../logger.js';
import type { AllowList } from '../policy/destination.js';
import { createNameResolver, type NameResolver } from '../policy/name-resolver.js';
import { createTcpDialer, startEgressGuard, type EgressGuard } from './guard.js';
import { createUpstreamProxyDialer, type UpstreamProxy } from './upstream-proxy.js';

/** The part of the configuration (src/config.ts) egress uses. */
export interface EgressConfig {
  dns: { servers: string[]; timeoutMs: number; lookupsPerKey: number; hostsFile: string | null };
  confinement: { mode: 'netns' | 'off' };
  egressUpstreamProxy: UpstreamProxy | undefined;
  allowHosts: AllowList;
  /** FETCH_ALLOW_HOSTS as written, for the warning. */
  fetchAllowHosts: string[];
}

export interface Egress {
  resolve: NameResolver['resolve'];
  guard: EgressGuard;
  /** A private folder for the guard's and the resident sandbox's sockets; null unconfined. */
  runtimeDir: string | null;
}

/**
 * FETCH_ALLOW_HOSTS, when set, told in the log. One name resolver for submission, the egress guard and callbacks, each look-up bounded and
 * counted against its client (src/policy/name-resolver.ts), and the egress guard confined tools
 * reach the network through.
 */
export async function startEgress(
  config: EgressConfig,
  deps: { tmpdir: string; log: Logger; onStop: (stop: () => void | Promise<void>) => void },
): Promise<Egress> {
  const { log } = deps;
  if (config.allowHosts.length > 0) {
    log.warn(
      { hosts: config.fetchAllowHosts },
      'FETCH_ALLOW_HOSTS is set: these destinations bypass the address policy',
    );
  }
  const { resolve } = createNameResolver({
    servers: config.dns.servers,
    timeoutMs: config.dns.timeoutMs,
    perClient: config.dns.lookupsPerKey,
    hostsFile: config.dns.hostsFile,
  });
  // Confined tools reach the guard through its Unix socket alone, and the resident yt-dlp listens
  // on one: a private folder keeps them ours.
  const runtimeDir =
    config.confinement.mode === 'netns' ? await fs.mkdtemp(path.join(deps.tmpdir, 'source-fetch-')) : null;
  if (runtimeDir) deps.onStop(() => fs.rm(runtimeDir, { recursive: true, force: true }));
  if (config.egressUpstreamProxy) {
    // Neither its address nor its credentials: the operator knows them, a log reader need not.
    log.info('the egress guard reaches checked destinations through the upstream proxy (EGRESS_UPSTREAM_PROXY)');
  }
  const guard = await startEgressGuard({
    resolve,
    dial: config.egressUpstreamProxy ? createUpstreamProxyDialer(config.egressUpstreamProxy) : createTcpDialer(),
    allowHosts: config.allowHosts,
    logger: log,
    ...(runtimeDir ? { socketPath: path.join(runtimeDir, 'egress-guard.sock') } : {}),
  });
  deps.onStop(() => guard.close());
  return { resolve, guard, runtimeDir };
}
