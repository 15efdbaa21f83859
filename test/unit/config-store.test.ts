import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';

/** The store's bounds in the configuration: the allowance per key and the free space to keep. */
describe("the store's bounds in the configuration", () => {
  it('default to a quarter of the cap per key a day, and room for one job (its download and its WAV)', () => {
    const config = loadConfig({
      ARTIFACT_CAP_BYTES: '4000001',
      MAX_DOWNLOAD_BYTES: '3000000',
      MAX_OUTPUT_BYTES: '2000000',
    });
    expect(config.storeBytesPerKeyPerDay).toBe(1_000_000);
    expect(config.storeMinFreeBytes).toBe(5_000_000);
    const defaults = loadConfig({});
    expect([defaults.storeBytesPerKeyPerDay, defaults.storeMinFreeBytes]).toEqual([
      (50 * 1024 ** 3) / 4,
      4 * 1024 ** 3,
    ]);
  });

  it('take what is given; 0 turns each off', () => {
    expect(loadConfig({ STORE_BYTES_PER_KEY_PER_DAY: '1234', STORE_MIN_FREE_BYTES: '5678' })).toMatchObject({
      storeBytesPerKeyPerDay: 1234,
      storeMinFreeBytes: 5678,
    });
    expect(loadConfig({ STORE_BYTES_PER_KEY_PER_DAY: '0', STORE_MIN_FREE_BYTES: '0' })).toMatchObject({
      storeBytesPerKeyPerDay: null,
      storeMinFreeBytes: 0,
    });
  });

  it('refuse what is not a byte count, naming the variable', () => {
    expect(() => loadConfig({ STORE_BYTES_PER_KEY_PER_DAY: '-1' })).toThrow(ConfigError);
    expect(() => loadConfig({ STORE_MIN_FREE_BYTES: 'lots' })).toThrow(/STORE_MIN_FREE_BYTES/);
  });
});
