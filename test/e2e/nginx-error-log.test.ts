/**
 * nginx writes the client's request line, query string included, into its error-log lines about a
 * request. With the app out of reach every proxied request fails with such a line, so artifact
 * requests carrying a signature must not reach the error log (nginx/templates logs only `crit` for
 * them), while the API's failures still do: the control that shows the error log is written.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createUrlSigner } from '../../src/delivery/signed-url.js';
import { artifactUrlPath } from '../../src/store/layout.js';
import { API_KEY, createArtifactStore, SIGNING_SECRET, type ArtifactStore } from '../../bench/delivery/stack.js';
import { freePort, startNginx, type RunningNginx } from '../support/nginx.js';

let store: ArtifactStore;
let nginx: RunningNginx;
let cid: string;

beforeAll(async () => {
  store = await createArtifactStore();
  cid = await store.add(Buffer.from('served only with the app'));
  // Nothing listens on the app's port.
  nginx = await startNginx({ appPort: await freePort(), artifactRoot: store.root });
});

afterAll(async () => {
  await nginx?.stop();
  await store?.remove();
});

describe("nginx's error log with the app out of reach", () => {
  it('has the failures of API requests but no signature of an artifact request in any form', async () => {
    const { expires, signature } = createUrlSigner(SIGNING_SECRET).sign(cid, 'audio.wav', 600);
    const artifact = artifactUrlPath(cid, 'audio.wav');
    const asked: Array<[string, Record<string, string>]> = [
      // The form nginx answers alone after asking the app, which is down.
      [`${artifact}?expires=${expires}&sig=${signature}`, {}],
      [`${artifact}?expires=${expires}&sig=${signature}`, { range: 'bytes=0-9' }],
      // Forms that go to the app: another order, a key beside it, a conditional.
      [`${artifact}?sig=${signature}&expires=${expires}`, {}],
      [`${artifact}?expires=${expires}&sig=${signature}`, { 'x-api-key': API_KEY }],
      [`${artifact}?expires=${expires}&sig=${signature}`, { 'if-none-match': '*' }],
    ];
    for (const [target, headers] of asked) {
      const res = await fetch(nginx.url(target), { headers });
      await res.arrayBuffer();
      expect(res.status, target).toBe(502);
    }
    // The control: an API request with a marker in its query fails the same way, and is logged.
    const control = await fetch(nginx.url('/jobs/some-job?marker=error-log-control'));
    await control.arrayBuffer();
    expect(control.status).toBe(502);

    // Every failure is in the access log, without its query string.
    const lines = await nginx.accessLines(
      (line) => line.status === '502',
      (failed) => failed.length >= asked.length + 1,
    );
    expect(lines.filter((line) => line.uri === `${artifact}?redacted`)).toHaveLength(asked.length);
    expect(nginx.accessLog()).not.toContain(signature);

    expect(nginx.errorLog()).toContain('error-log-control');
    expect(nginx.errorLog()).toMatch(/connect\(\) failed/);
    expect(nginx.errorLog()).not.toContain(signature);
    expect(nginx.errorLog()).not.toContain(artifact);
    expect(nginx.stderr()).not.toContain(signature);
  });
});
