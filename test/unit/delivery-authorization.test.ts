/**
 * What the delivery handler tells nginx when nginx only asks whether a signed URL may be served:
 * in-process, with a fixed clock and a real file.
 */
import { describe, expect, it } from 'vitest';
import { AUTHORIZATION_CACHE_MAX_S, AUTHORIZE_ONLY_HEADER } from '../../src/delivery/handler.js';
import { artifactUrlPath } from '../../src/store/layout.js';
import { artifactAppFixture, CID, expiredSignedPath, httpDate, KEY, NOW, signedPath } from '../support/artifact-app.js';

const { served, appFor } = artifactAppFixture();

describe("nginx's authorization of a signed URL", () => {
  const ask = (target: string, headers: Record<string, string> = {}) => appFor('/_artifacts/').request(target, { headers: { [AUTHORIZE_ONLY_HEADER]: '1', ...headers } });

  it('says yes with the headers of the answer, for at most a minute, and serves nothing', async () => {
    served.length = 0;
    const res = await ask(signedPath(600));
    expect(res.status).toBe(200);
    expect(await res.text()).toBe('');
    expect(res.headers.get('x-accel-expires')).toBe(`@${NOW / 1000 + AUTHORIZATION_CACHE_MAX_S}`);
    expect(res.headers.get('x-accel-redirect')).toBeNull();
    expect(res.headers.get('etag')).toBe(`"${CID}"`);
    expect(res.headers.get('content-disposition')).toBe(`inline; filename="audio.wav"; filename*=UTF-8''audio.wav`);
    expect(res.headers.get('x-artifact-cache-control')).toBe('public, immutable');
    expect(res.headers.get('x-artifact-expires')).toBe(httpDate(NOW / 1000 + 600));
    expect(served).toEqual([]);
  });

  it('never lets nginx keep the yes past the signature', async () => {
    const res = await ask(signedPath(20));
    // nginx serves a kept answer through its expiry second; the signature is void from its start.
    expect(res.headers.get('x-accel-expires')).toBe(`@${NOW / 1000 + 20 - 1}`);
  });

  it('is never kept for a key (nginx does not ask with one, but a client might)', async () => {
    const res = await ask(artifactUrlPath(CID, 'audio.wav'), { 'x-api-key': KEY });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-accel-expires')).toBe('0');
  });

  it.each([
    ['no credential', artifactUrlPath(CID, 'audio.wav')],
    ['an altered signature', signedPath(600).replace(/sig=(.)/, (_m, c: string) => `sig=${c === 'A' ? 'B' : 'A'}`)],
    ['an expired signature', expiredSignedPath()],
    ['unknown content', signedPath(600, 'd'.repeat(64))],
  ])('says a bare 403 to %s (the app then answers the request itself)', async (_label, target) => {
    const res = await ask(target);
    expect(res.status).toBe(403);
    expect(await res.text()).toBe('');
    expect(res.headers.get('x-accel-expires')).toBeNull();
  });
});
