import { describe, expect, it } from 'vitest';
import path from 'node:path';
import { welcomeText } from '../../src/ops/welcome.js';

describe('the words at start-up', () => {
  it('name the page to open and the file of a generated key, resolved, never a key', () => {
    const text = welcomeText({
      address: '127.0.0.1',
      port: 8080,
      keys: { kind: 'file', file: 'data/api-key', created: true },
      behindNginx: false,
    });
    const file = path.resolve('data/api-key');
    expect(text).toBe(
      'source-fetch is ready: open http://127.0.0.1:8080/ in a browser.\n' +
        `The API key was generated into ${file} (read it with: cat ${file}); the page asks for it once per tab.\n`,
    );
    expect(
      welcomeText({ address: '127.0.0.1', port: 1, keys: { kind: 'file', file, created: false }, behindNginx: false }),
    ).toContain(`The API key is in ${file} `);
  });

  it('open a wildcard address as localhost and an IPv6 one in brackets; behind nginx, point there', () => {
    const configured = { kind: 'configured' } as const;
    expect(welcomeText({ address: '0.0.0.0', port: 8080, keys: configured, behindNginx: true })).toBe(
      'source-fetch is ready: open http://localhost:8080/ in a browser.\n' +
        "Behind nginx, open nginx's address instead.\n" +
        'The API key is one of API_KEYS; the page asks for it once per tab.\n',
    );
    expect(welcomeText({ address: '::', port: 80, keys: configured, behindNginx: false })).toContain(
      'http://localhost:80/',
    );
    expect(welcomeText({ address: '::1', port: 80, keys: configured, behindNginx: false })).toContain(
      'http://[::1]:80/',
    );
  });
});
