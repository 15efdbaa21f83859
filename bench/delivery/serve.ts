/**
 * The bare delivery app of the benchmark (./stack.ts, no nginx, node's router in front) alone in
 * a process, for profiling it while a load runs elsewhere:
 *
 *   node --cpu-prof --import tsx bench/delivery/serve.ts < some-fifo
 *   wrk -t2 -c32 -d10s -H 'Range: bytes=1000-66535' http://127.0.0.1:<port><signed>
 *
 * Stores one 10 MB WAV, prints one JSON line ({ port, signed, keyed }: the signed URL's path,
 * valid for 6 hours, and the plain path to ask with `X-API-Key: delivery-test-key`), and serves
 * until its standard input ends, then exits (which writes the profile).
 */
import { artifactUrlPath, AUDIO_ARTIFACT_NAME } from '../../src/store/layout.js';
import { createArtifactStore, startDeliveryApp } from './stack.js';

const WAV_SECONDS = 57;
const store = await createArtifactStore();
const { cid } = await store.addWav(WAV_SECONDS);
const app = await startDeliveryApp({ root: store.root, accelRedirectPrefix: null, record: false });
console.log(
  JSON.stringify({
    port: app.port,
    signed: app.signedPath(cid, AUDIO_ARTIFACT_NAME, 6 * 3600),
    keyed: artifactUrlPath(cid, AUDIO_ARTIFACT_NAME),
  }),
);
process.stdin.resume();
process.stdin.once('end', () => {
  void app
    .close()
    .then(() => store.remove())
    .then(() => process.exit(0));
});
