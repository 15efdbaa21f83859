/**
 * What the delivery handler tells caches: in-process, with a fixed clock and a real file.
 */
import { describe, expect, it } from 'vitest';
import { artifactUrlPath } from '../../src/store/layout.js';
import { artifactAppFixture, CID, httpDate, KEY, NOW, signedPath } from '../support/artifact-app.js';

const { appFor } = artifactAppFixture();

describe('caching headers by credential', () => {
  it.each([null, '/_artifacts/'])(
    'keyed answers are private; signed ones public until the signature expires (accel %s)',
    async (prefix) => {
      const app = appFor(prefix);
      // Behind nginx, the header nginx sets on every request it passes on (ACCEL_REQUEST_HEADER).
      const viaNginx: Record<string, string> = prefix === null ? {} : { 'x-sendfile-type': 'X-Accel-Redirect' };
      const keyed = await app.request(artifactUrlPath(CID, 'audio.wav'), {
        headers: { 'x-api-key': KEY, ...viaNginx },
      });
      const signed = await app.request(signedPath(600), { headers: viaNginx });
      // Behind nginx the app hands the values over under names nginx copies onto successes only.
      const cacheControl = prefix === null ? 'cache-control' : 'x-artifact-cache-control';
      const expires = prefix === null ? 'expires' : 'x-artifact-expires';
      expect(keyed.headers.get(cacheControl)).toBe('private, max-age=31536000, immutable');
      expect(keyed.headers.get(expires)).toBeNull();
      expect(signed.headers.get(cacheControl)).toBe('public, immutable');
      expect(signed.headers.get(expires)).toBe(httpDate(NOW / 1000 + 600));
      if (prefix !== null) {
        for (const res of [keyed, signed]) {
          expect(res.headers.get('cache-control')).toBeNull();
          expect(res.headers.get('expires')).toBeNull();
        }
      }
    },
  );

  it('a 304 carries the same caching headers as the answer it stands for', async () => {
    const res = await appFor(null).request(signedPath(600), { headers: { 'if-none-match': `"${CID}"` } });
    expect(res.status).toBe(304);
    expect(res.headers.get('cache-control')).toBe('public, immutable');
    expect(res.headers.get('expires')).toBe(httpDate(NOW / 1000 + 600));
  });
});
