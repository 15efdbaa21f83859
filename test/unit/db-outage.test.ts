import { describe, expect, it } from 'vitest';
import { databaseOutage } from '../../src/db/outage.js';

describe('databaseOutage', () => {
  const withCode = (code: string, message = 'x') => Object.assign(new Error(message), { code });

  it('reads a lost or refused connection, a server shutting down, full of connections or refusing this client, and SQLite busy as unreachable', () => {
    for (const code of [
      'ECONNREFUSED',
      'ECONNRESET',
      'CONNECTION_CLOSED',
      'CONNECT_TIMEOUT',
      '57P01',
      '57P03',
      '53300',
      '28P01',
      '3D000',
      '08006',
      '08001',
      'SQLITE_BUSY',
    ]) {
      expect(databaseOutage(withCode(code))).toBe('unreachable');
    }
  });

  it('reads a write refused for want of space as full', () => {
    for (const code of ['53100', 'SQLITE_FULL', 'ENOSPC']) expect(databaseOutage(withCode(code))).toBe('full');
  });

  it('follows the chain of causes (drizzle wraps the driver error)', () => {
    const wrapped = new Error('Failed query: insert into jobs ...', {
      cause: new Error('driver', { cause: withCode('ECONNREFUSED') }),
    });
    expect(databaseOutage(wrapped)).toBe('unreachable');
  });

  it('leaves everything else alone: a constraint, a syntax error, a plain bug', () => {
    for (const err of [
      withCode('23505'),
      withCode('42601'),
      withCode('SQLITE_CONSTRAINT_UNIQUE'),
      new TypeError('undefined is not a function'),
      null,
      'text',
    ]) {
      expect(databaseOutage(err)).toBeNull();
    }
  });
});
