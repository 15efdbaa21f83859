import type { ApiErrorCodeOf } from '../api-errors.js';
import { ServiceError } from '../errors.js';
import { checkDestination, type AllowList, type Resolver } from './destination.js';

/**
 * Source URLs: what a client may submit, and the key a URL alias is stored under.
 *
 * Accepting a URL (`parseSourceUrl`), in order; each refusal is `invalid_input` with its code:
 * 1. At most 2048 characters, before and after WHATWG serialisation (`url_too_long`).
 * 2. No control characters, tabs or newlines anywhere (`url_invalid`); WHATWG would silently
 *    delete them, hiding what was actually submitted.
 * 3. Parses as a WHATWG URL (`url_invalid`). The parser canonicalises the host: lower case,
 *    IDN to punycode, full-width digits to ASCII, decimal/octal/hex/short IPv4 (`2130706433`,
 *    `0x7f.1`, `127.1`) to dotted decimal, IPv6 compressed, and `\` read as `/`.
 * 4. Scheme http or https (`url_scheme_not_allowed`).
 * 5. No user name or password (`url_credentials_not_allowed`): credentials in URLs leak into
 *    logs and job records, and `user@host` is a classic way to disguise the real host.
 * 6. A host with no empty label other than one trailing dot (`url_host_missing`, `url_invalid`).
 * 7. No `__youtubedl_smuggle` anywhere, even percent-encoded (`url_smuggled_data`): yt-dlp reads
 *    options from a URL fragment of that name, one of which turns its proxy off.
 * The fragment is then dropped: it is never sent to a server, and yt-dlp must never see one.
 * The destination is then checked on exactly `destinationOf(url)`: URL.hostname without IPv6
 * brackets and without the single trailing dot, and the explicit or default port. Downstream
 * code must hand `url.href` to the downloader, never the raw string, so every parser sees the
 * canonical URL that was checked (Python's urlsplit, for one, does not read `\` as `/`).
 *
 * The alias key (`aliasKey`), for a URL returned by `parseSourceUrl`:
 * - scheme and host lower case, IDN as punycode (WHATWG already did it);
 * - the host's trailing dot dropped; the port dropped when it is the scheme's default;
 * - the path kept exactly as serialised (case-sensitive, percent-escapes untouched);
 * - query parameters sorted by key (raw text, code-unit order); the sort is stable, so repeated
 *   keys keep their relative order; empty parameters (`a=1&&b=2`) and an empty `?` removed;
 * - the fragment dropped (it is never sent to the server).
 */

export const MAX_SOURCE_URL_LENGTH = 2048;

const DEFAULT_PORTS: Record<string, number> = { 'http:': 80, 'https:': 443 };

const CONTROL_CHARS = /[\u0000-\u001f\u007f]/;

export function parseSourceUrl(raw: string): URL {
  if (typeof raw !== 'string') invalid('url_invalid', 'The URL must be a string.');
  if (raw.length > MAX_SOURCE_URL_LENGTH) tooLong();
  if (CONTROL_CHARS.test(raw)) invalid('url_invalid', 'The URL contains control characters.');

  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    invalid('url_invalid', 'The URL could not be parsed.');
  }
  if (url.href.length > MAX_SOURCE_URL_LENGTH) tooLong();
  if (DEFAULT_PORTS[url.protocol] === undefined) {
    invalid('url_scheme_not_allowed', 'Only http and https URLs are accepted.');
  }
  if (url.username !== '' || url.password !== '') {
    invalid('url_credentials_not_allowed', 'URLs must not carry a user name or password.');
  }
  // The URL standard takes port 0, but nothing can be connected to there.
  if (url.port === '0') invalid('port_invalid', 'Port 0 is not a valid TCP port.');
  const host = hostForCheck(url);
  if (host === '') invalid('url_host_missing', 'The URL has no host.');
  if (!host.includes(':') && host.split('.').includes('')) {
    invalid('url_invalid', 'The URL host has an empty label.');
  }
  if (SMUGGLED.test(fullyDecoded(url.href))) {
    invalid('url_smuggled_data', 'The URL carries downloader options (__youtubedl_smuggle), which are refused.');
  }
  url.hash = '';
  return url;
}

const SMUGGLED = /__youtubedl_smuggle/i;

/** Percent-decoded until it no longer changes (a few rounds at most), so no encoding hides a name. */
function fullyDecoded(text: string): string {
  let current = text;
  for (let round = 0; round < 5; round++) {
    let next: string;
    try {
      next = decodeURIComponent(current);
    } catch {
      next = current.replace(/%([0-9a-f]{2})/gi, (_m, hex: string) => String.fromCharCode(parseInt(hex, 16)));
    }
    if (next === current) break;
    current = next;
  }
  return current;
}

/** The host and port a connection for this URL goes to: what the destination policy checks. */
export function destinationOf(url: URL): { host: string; port: number } {
  return { host: hostForCheck(url), port: url.port === '' ? DEFAULT_PORTS[url.protocol]! : Number(url.port) };
}

export function aliasKey(url: URL): string {
  const host = url.hostname.endsWith('.') ? url.hostname.slice(0, -1) : url.hostname;
  const port = url.port === '' ? '' : `:${url.port}`;
  const query = url.search
    .slice(1)
    .split('&')
    .filter((p) => p !== '')
    .map((p) => ({ p, key: p.split('=', 1)[0]! }))
    .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
    .map(({ p }) => p)
    .join('&');
  return `${url.protocol}//${host}${port}${url.pathname}${query === '' ? '' : `?${query}`}`;
}

function hostForCheck(url: URL): string {
  let host = url.hostname;
  if (host.startsWith('[') && host.endsWith(']')) host = host.slice(1, -1);
  return host.endsWith('.') ? host.slice(0, -1) : host;
}

function invalid(code: ApiErrorCodeOf<'invalid_input'>, message: string): never {
  throw new ServiceError('invalid_input', code, message);
}

function tooLong(): never {
  invalid('url_too_long', `URLs are limited to ${MAX_SOURCE_URL_LENGTH} characters.`);
}

/**
 * A submitted URL's destination checked against the address policy (./destination.ts), its
 * look-ups counted against the submitting key.
 */
export function sourceDestinationCheck(deps: {
  resolve: Resolver;
  allowHosts: AllowList;
}): (target: URL, apiKeyId?: string) => Promise<void> {
  return async (target, apiKeyId) => {
    const { host, port } = destinationOf(target);
    await checkDestination(host, port, {
      resolve: deps.resolve,
      allowHosts: deps.allowHosts,
      client: `key:${apiKeyId ?? ''}`,
    });
  };
}
