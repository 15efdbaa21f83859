import http from 'node:http';
import net from 'node:net';
import type { Duplex } from 'node:stream';
import tls from 'node:tls';
import type { Dialer } from '../egress/guard.js';
import { ServiceError } from '../errors.js';
import { checkDestination, type AllowList, type Resolver } from '../policy/destination.js';
import { destinationOf } from '../policy/source-url.js';

/**
 * One attempt to POST a callback, under the same address policy as a source URL, at connect
 * time: the host is resolved once, every address it resolves to must be allowed, and the
 * connection goes to a checked address, never to the name (so a name that resolves elsewhere the
 * second time, DNS rebinding, cannot steer it). HTTPS runs over that socket, checked against the
 * URL's host name. Redirects are not followed: a 3xx is the receiver's answer, and a failed
 * attempt. Nothing is read of the receiver's answer but its status.
 *
 * Each connect has `connectTimeoutMs` of its own (`connect_timeout`), far shorter than the whole
 * attempt's `timeoutMs` (`timeout`): an address that drops connections costs a delivery slot
 * seconds, not the whole time limit.
 */
export interface CallbackRequest {
  url: string;
  headers: Record<string, string>;
  body: string;
  /** Whose callback: the name look-up is counted against this client (src/policy/name-resolver.ts). */
  client?: string;
}

/** `status` when the receiver answered; otherwise `error`, a stable code. */
export type SendResult = { status: number; error: null } | { status: null; error: string };

export type SendCallback = (request: CallbackRequest, signal: AbortSignal) => Promise<SendResult>;

export interface CallbackSenderDeps {
  resolve: Resolver;
  dial: Dialer;
  allowHosts: AllowList;
  /** Bounds the whole attempt: look-up, connect, TLS, request and the answer's status line. */
  timeoutMs: number;
  /** Bounds each connect (per address tried), within timeoutMs. */
  connectTimeoutMs: number;
  /** Certificates to trust instead of the system's (tests). */
  tlsCa?: string;
}

export const USER_AGENT = 'source-fetch-webhook/1';

export function createCallbackSender(deps: CallbackSenderDeps): SendCallback {
  return async (request, stop) => {
    const timeout = AbortSignal.timeout(deps.timeoutMs);
    const signal = AbortSignal.any([stop, timeout]);
    const failed = (otherwise: string): SendResult => ({
      status: null,
      error: timeout.aborted ? 'timeout' : stop.aborted ? 'aborted' : otherwise,
    });
    const url = new URL(request.url);
    const { host, port } = destinationOf(url);

    let addresses: string[];
    try {
      ({ addresses } = await checkDestination(host, port, {
        resolve: deps.resolve,
        allowHosts: deps.allowHosts,
        resolveTimeoutMs: deps.timeoutMs,
        client: request.client,
        signal,
      }));
    } catch (err) {
      if (err instanceof ServiceError) return { status: null, error: err.code };
      throw err;
    }

    let socket: Duplex | undefined;
    let connectTimedOut = false;
    // Every address passed the check, so falling back to the next one reaches nothing unchecked.
    for (const address of addresses) {
      if (signal.aborted) break;
      const connectTimeout = AbortSignal.timeout(deps.connectTimeoutMs);
      try {
        socket = await deps.dial(address, port, AbortSignal.any([signal, connectTimeout]));
        break;
      } catch {
        // the next address, if any
        connectTimedOut = connectTimeout.aborted;
      }
    }
    if (socket === undefined) return failed(connectTimedOut ? 'connect_timeout' : 'connect_failed');

    try {
      if (url.protocol === 'https:') {
        try {
          socket = await startTls(socket, host, deps.tlsCa, signal);
        } catch {
          return failed('tls_failed');
        }
      }
      try {
        return { status: await post(socket, url, request, signal), error: null };
      } catch {
        return failed('no_response');
      }
    } finally {
      socket.destroy();
    }
  };
}

function startTls(socket: Duplex, host: string, ca: string | undefined, signal: AbortSignal): Promise<Duplex> {
  return new Promise((resolve, reject) => {
    // SNI takes names only; an IP literal is still checked against the certificate's IP entries.
    const secure = tls.connect({
      socket,
      host,
      servername: net.isIP(host) ? undefined : host,
      ALPNProtocols: ['http/1.1'],
      ...(ca ? { ca } : {}),
    });
    const onAbort = (): void => void secure.destroy(new Error('aborted'));
    signal.addEventListener('abort', onAbort, { once: true });
    secure.once('secureConnect', () => {
      signal.removeEventListener('abort', onAbort);
      resolve(secure);
    });
    secure.once('error', (err: Error) => {
      signal.removeEventListener('abort', onAbort);
      secure.destroy();
      reject(err);
    });
  });
}

function post(socket: Duplex, url: URL, request: CallbackRequest, signal: AbortSignal): Promise<number> {
  return new Promise((resolve, reject) => {
    const outgoing = http.request({
      method: 'POST',
      path: `${url.pathname}${url.search}`,
      headers: {
        host: url.host,
        'content-type': 'application/json',
        'content-length': String(Buffer.byteLength(request.body)),
        'user-agent': USER_AGENT,
        connection: 'close',
        ...request.headers,
      },
      createConnection: () => socket,
      signal,
    });
    outgoing.once('response', (answer) => {
      resolve(answer.statusCode ?? 0);
      answer.destroy();
    });
    outgoing.once('error', reject);
    outgoing.end(request.body);
  });
}
