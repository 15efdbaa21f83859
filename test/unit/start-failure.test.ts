import { describe, expect, it } from 'vitest';
import { DatabaseInUseError } from '../../src/db/sqlite-lock.js';
import { startFailureText } from '../../src/ops/start-failure.js';

const errno = (code: string) => Object.assign(new Error(code), { code });

describe('startFailureText', () => {
  it('says what to change for the failures a person can fix', () => {
    const listen = { host: '::1', port: 80 };
    expect(startFailureText(errno('EADDRINUSE'), listen)).toMatch(/^\[::1\]:80 is already in use /);
    expect(startFailureText(errno('EACCES'), listen)).toMatch(/may not listen on \[::1\]:80 .*set PORT to 1024/);
    expect(startFailureText(errno('EADDRNOTAVAIL'), { host: '10.9.9.9', port: 8080 })).toBe(
      'HOST 10.9.9.9 is not an address of this machine: set HOST to one of its addresses, or 0.0.0.0 for all.',
    );
    expect(startFailureText(new DatabaseInUseError('/d/source-fetch.sqlite'), listen)).toContain(
      '/d/source-fetch.sqlite',
    );
  });

  it('is null for anything else, which keeps its stack', () => {
    expect(startFailureText(new TypeError('a defect'), { host: '127.0.0.1', port: 8080 })).toBeNull();
    expect(startFailureText(errno('ENOENT'), { host: '127.0.0.1', port: 8080 })).toBeNull();
  });
});
