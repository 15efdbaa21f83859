import path from 'node:path';

/** Where the API keys come from: API_KEYS, or the file the generated key is kept in. */
export type ApiKeySource = { kind: 'configured' } | { kind: 'file'; file: string; created: boolean };

/**
 * What the service says on standard error once it listens, in plain words for the person who
 * started it, beside the JSON log on standard output: the address to open, and where the API key
 * is (its file; never the key itself).
 */
export function welcomeText(opts: {
  /** The address the server listens on, as the socket reports it. */
  address: string;
  port: number;
  keys: ApiKeySource;
  /** ACCEL_REDIRECT_PREFIX is set: people reach the service through nginx. */
  behindNginx: boolean;
}): string {
  const lines = [`source-fetch is ready: open ${openUrl(opts.address, opts.port)} in a browser.`];
  if (opts.behindNginx) lines.push("Behind nginx, open nginx's address instead.");
  if (opts.keys.kind === 'configured') {
    lines.push('The API key is one of API_KEYS; the page asks for it once per tab.');
  } else {
    const file = path.resolve(opts.keys.file);
    const made = opts.keys.created ? 'was generated into' : 'is in';
    lines.push(`The API key ${made} ${file} (read it with: cat ${file}); the page asks for it once per tab.`);
  }
  return `${lines.join('\n')}\n`;
}

/** The page's URL: a wildcard address is reached as localhost; an IPv6 one in brackets. */
function openUrl(address: string, port: number): string {
  const host =
    address === '0.0.0.0' || address === '::' ? 'localhost' : address.includes(':') ? `[${address}]` : address;
  return `http://${host}:${port}/`;
}
