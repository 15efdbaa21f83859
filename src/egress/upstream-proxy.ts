import http from 'node:http';
import net from 'node:net';
import type { Duplex } from 'node:stream';
import type { Dialer } from './guard.js';

/**
 * The operator's upstream HTTP proxy (EGRESS_UPSTREAM_PROXY), for hosts whose own addresses are
 * blocked by the sites they fetch from. The egress guard checks a destination exactly as without
 * it (resolve once, check every address) and then, instead of connecting to the checked address
 * itself, asks the upstream proxy for a tunnel to that address: `CONNECT <ip>:<port>`, never the
 * name, so the upstream has nothing to resolve and cannot reach anything but what was checked.
 * Plain-HTTP requests go through such a tunnel too, so the guard still reads their redirects and
 * the origin still gets its own Host header (an absolute-URI request naming the IP would make a
 * proxy rewrite Host to the IP, RFC 9112 §3.2.2). The proxy must therefore allow CONNECT to the
 * ports media is fetched from (80 as well as 443).
 *
 * The credentials live in `authorization` only; the object serializes without them, so a config
 * or an error that reaches a log cannot carry them.
 */
export interface UpstreamProxy {
  host: string;
  port: number;
  /** `Basic …` for the proxy's user and password, or null. */
  readonly authorization: string | null;
  toJSON(): object;
}

const USAGE = 'must be an http:// URL of the proxy, such as http://user:password@proxy.internal:3128';

/** The proxy, or why the value is not one (a message that never repeats the value). */
export function parseUpstreamProxy(value: string): UpstreamProxy | string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return USAGE;
  }
  if (url.protocol !== 'http:')
    return `${USAGE} (the guard speaks plain HTTP to it and tunnels through it with CONNECT)`;
  if (url.hostname === '') return USAGE;
  if ((url.pathname !== '/' && url.pathname !== '') || url.search !== '' || url.hash !== '')
    return `${USAGE}, without a path, query or fragment`;
  let authorization: string | null = null;
  if (url.username !== '' || url.password !== '') {
    try {
      const credentials = `${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`;
      authorization = `Basic ${Buffer.from(credentials, 'utf8').toString('base64')}`;
    } catch {
      return `${USAGE}, with its user and password percent-encoded`;
    }
  }
  const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
  const port = url.port === '' ? 80 : Number(url.port);
  return {
    host,
    port,
    authorization,
    toJSON: () => ({ host, port, credentials: authorization === null ? null : '[redacted]' }),
  };
}

/** The authority of a CONNECT to a numeric address. */
function authorityOf(address: string, port: number): string {
  return net.isIPv6(address) ? `[${address}]:${port}` : `${address}:${port}`;
}

/**
 * A Dialer that opens a tunnel through the upstream proxy to a checked address. Errors name what
 * failed (the proxy's status, or the socket error's code), never the credentials.
 */
export function createUpstreamProxyDialer(proxy: UpstreamProxy): Dialer {
  return (address, port, signal) =>
    new Promise<Duplex>((resolve, reject) => {
      if (net.isIP(address) === 0) {
        reject(new Error('the dialer only connects to IP addresses'));
        return;
      }
      if (signal?.aborted) {
        reject(new Error('connect aborted'));
        return;
      }
      const authority = authorityOf(address, port);
      const request = http.request({
        host: proxy.host,
        port: proxy.port,
        method: 'CONNECT',
        path: authority,
        headers: {
          host: authority,
          ...(proxy.authorization === null ? {} : { 'proxy-authorization': proxy.authorization }),
        },
        agent: false,
      });
      // The signal bounds the handshake only: once open, the tunnel belongs to the guard.
      const onAbort = (): void => {
        request.destroy();
        reject(new Error('connect aborted'));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      request.once('connect', (answer: http.IncomingMessage, socket: Duplex, head: Buffer) => {
        signal?.removeEventListener('abort', onAbort);
        const status = answer.statusCode ?? 0;
        if (status < 200 || status > 299) {
          socket.destroy();
          reject(new Error(`the upstream proxy answered ${status} to CONNECT ${authority}`));
          return;
        }
        if (head.length > 0) socket.unshift(head);
        resolve(socket);
      });
      request.once('error', (err: NodeJS.ErrnoException) => {
        signal?.removeEventListener('abort', onAbort);
        reject(new Error(`the upstream proxy could not be reached (${err.code ?? 'error'})`));
      });
      request.end();
    });
}
