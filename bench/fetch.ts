/**
 * Fetch latency (run by hand: npm run build && npx tsx bench/fetch.ts). A 3-minute stereo AAC
 * file served on 127.0.0.1; in one run:
 *   - the service: submit → done (metadata step, download, probe, conversion, store), 3 times;
 *   - by hand: the plain `yt-dlp -f bestaudio` download plus the same ffmpeg conversion, 3 times.
 * Prints the median of each and their ratio.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { makeTone } from '../test/support/media.js';
import { startMediaServer } from '../test/support/media-server.js';
import { startService } from '../test/support/service.js';

const RUNS = 3;
// Asynchronous: the media server runs in this process and must keep answering.
const run = promisify(execFile);
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

const fixtureDir = path.join(tmpdir(), 'source-fetch-fixtures');
const tone = await makeTone(fixtureDir, { seconds: 180, channels: 2, sampleRate: 48000, format: 'm4a' });
const media = await startMediaServer();
media.serveFile('/tone.m4a', tone.path, { contentType: 'audio/mp4' });
const svc = await startService({ env: { FETCH_ALLOW_HOSTS: media.hostPort } });

const service: number[] = [];
for (let i = 0; i < RUNS; i++) {
  // A distinct query string per run: the same URL would be born done.
  const started = performance.now();
  const job = await svc.submit(media.url(`/tone.m4a?run=${i}`));
  const done = await svc.waitForJob(job.job_id, ['done', 'failed'], 300_000);
  service.push(performance.now() - started);
  if (done.status !== 'done') throw new Error(`job failed: ${JSON.stringify(done.error)}`);
}
await svc.stop();

const byHand: number[] = [];
for (let i = 0; i < RUNS; i++) {
  const dir = await mkdtemp(path.join(tmpdir(), 'sf-bench-fetch-'));
  const started = performance.now();
  await run('yt-dlp', ['-q', '-f', 'bestaudio/best', '-o', `${dir}/source.%(ext)s`, media.url(`/tone.m4a?hand=${i}`)]);
  await run('ffmpeg', ['-v', 'error', '-i', `${dir}/source.m4a`, '-ar', '44100', '-c:a', 'pcm_s16le', `${dir}/out.wav`]);
  byHand.push(performance.now() - started);
  await rm(dir, { recursive: true, force: true });
}
await media.close();

const s = median(service);
const h = median(byHand);
process.stdout.write(
  `3-minute AAC (48 kHz stereo) → 44.1 kHz WAV, median of ${RUNS}:\n` +
    `  service, submit → done:        ${(s / 1000).toFixed(2)} s   (runs: ${service.map((v) => (v / 1000).toFixed(2)).join(', ')})\n` +
    `  by hand, yt-dlp + ffmpeg:      ${(h / 1000).toFixed(2)} s   (runs: ${byHand.map((v) => (v / 1000).toFixed(2)).join(', ')})\n` +
    `  ratio service / by hand:       ${(s / h).toFixed(2)}\n`,
);
