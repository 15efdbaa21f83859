/**
 * What a converter that hostile media has taken over can leave at its output path, and what the
 * service then does with it (issue 45, findings 1 and 5). FFMPEG_PATH is a stand-in that runs the
 * real ffmpeg unless its input carries a marker (SF-ATTACK-<what>, in the m4a's comment tag), and
 * then acts on its own output path only, from inside its sandbox: a FIFO (whose blocking open
 * would hold a thread of libuv's pool for good), a socket, a link to a WAV outside its folder
 * (absolute and relative), or a quiet decoy that it replaces with the real WAV once the loudness
 * meter has started reading the decoy. Each is refused as conversion_failed, promptly, with the
 * worker freed, and nothing outside enters the store. The control: the same stand-in converts a
 * media file without a marker, and the job is done.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtemp, readdir, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { startService, type ServiceHandle } from '../support/service.js';

const ATTACKS = ['fifo', 'socket', 'link-absolute', 'link-relative', 'swap', 'wide'] as const;
type Attack = (typeof ATTACKS)[number];

let media: MediaServer;
let svc: ServiceHandle;
let dir: string;
/** A WAV outside the converter's folder, which the links point at. */
let outsideWav: string;

/** A 3-second m4a tone; `marker` in its comment tag. */
function makeM4a(file: string, marker: string, frequency: number): void {
  execFileSync('ffmpeg', [
    ...['-nostdin', '-y', '-loglevel', 'error', '-f', 'lavfi', '-i', `sine=frequency=${frequency}:duration=3`],
    ...['-ac', '2', '-c:a', 'aac', '-metadata', `comment=${marker}`, file],
  ]);
}

/**
 * The stand-in converter. Arguments as the service gives them: `-i file:<input>`, and the WAV's
 * output `file:<name>.wav` (beside an output of the input's tags). It runs in the converter's
 * sandbox, which sees its folder and the system.
 */
function standIn(relativeLinkTarget: string): string {
  return `#!/usr/bin/python3
import os, re, socket, struct, subprocess, sys, time
real = '/usr/bin/ffmpeg'
args = sys.argv[1:]
marker = None
if '-i' in args:
    source = args[args.index('-i') + 1]
    source = source[5:] if source.startswith('file:') else source
    try:
        found = re.search(rb'SF-ATTACK-([a-z-]+)', open(source, 'rb').read())
        marker = found and found.group(1).decode()
    except OSError:
        pass
if marker is None:
    os.execv(real, [real] + args)
at = max(i for i, arg in enumerate(args) if arg.endswith('.wav'))
out = args[at][5:] if args[at].startswith('file:') else args[at]
if marker == 'fifo':
    os.mkfifo(out)
elif marker == 'socket':
    socket.socket(socket.AF_UNIX).bind(out)
elif marker == 'link-absolute':
    os.symlink(${JSON.stringify(outsideWav)}, out)
elif marker == 'link-relative':
    os.symlink(${JSON.stringify(relativeLinkTarget)}, out)
elif marker == 'wide':
    # A header declaring 4,096 channels over 512 MiB of sparse data: 1.5 s of "audio".
    data = 512 * 1024 * 1024
    fmt = struct.pack('<HHIIHH', 1, 4096, 44100, 44100 * 4096 * 2, 4096 * 2, 16)
    with open(out, 'wb') as f:
        f.write(b'RIFF' + struct.pack('<I', 36 + data) + b'WAVEfmt ' + struct.pack('<I', 16) + fmt
                + b'data' + struct.pack('<I', data))
        f.truncate(44 + data)
elif marker == 'swap':
    # A quiet decoy first, long enough for the meter to start reading it; then the real WAV in its place.
    subprocess.run([real, '-nostdin', '-y', '-loglevel', 'error', '-f', 'lavfi',
                    '-i', 'sine=frequency=440:duration=3,volume=0.001', '-ac', '2', '-ar', '44100',
                    '-c:a', 'pcm_s16le', '-bitexact', 'file:' + out], check=True)
    time.sleep(1)
    subprocess.run([real] + args[:at] + ['file:' + out + '.real.wav'] + args[at + 1:], check=True)
    os.rename(out + '.real.wav', out)
sys.exit(0)
`;
}

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'sf-hostile-output-'));
  const dataDir = await mkdtemp(path.join(tmpdir(), 'sf-data-'));
  outsideWav = path.join(dataDir, 'outside.wav');
  execFileSync('ffmpeg', [
    ...['-nostdin', '-y', '-loglevel', 'error', '-f', 'lavfi', '-i', 'sine=frequency=660:duration=2'],
    ...['-ac', '2', '-ar', '44100', '-c:a', 'pcm_s16le', '-bitexact', outsideWav],
  ]);
  media = await startMediaServer();
  for (const attack of ATTACKS) {
    const file = path.join(dir, `${attack}.m4a`);
    makeM4a(file, `SF-ATTACK-${attack}`, 330);
    media.serveFile(`/${attack}.m4a`, file, { contentType: 'audio/mp4' });
  }
  const honest = path.join(dir, 'honest.m4a');
  makeM4a(honest, 'an honest tone', 550);
  media.serveFile('/honest.m4a', honest, { contentType: 'audio/mp4' });
  const ffmpeg = path.join(dir, 'ffmpeg');
  // The converter's output is <DATA_DIR>/work/<attempt>/<name>.wav: two levels up is DATA_DIR.
  await writeFile(ffmpeg, standIn('../../outside.wav'), { mode: 0o755 });
  svc = await startService({
    dataDir,
    env: {
      FETCH_ALLOW_HOSTS: media.hostPort,
      FFMPEG_PATH: ffmpeg,
      WORKER_CONCURRENCY: '2',
      FETCH_TIMEOUT_S: '60',
    },
  });
});

afterAll(async () => {
  await svc?.stop();
  await media?.close();
});

/** Every regular file under the store, by its SHA-256. */
async function storedHashes(): Promise<string[]> {
  const root = path.join(svc.dataDir, 'artifacts');
  const files = (await readdir(root, { recursive: true, withFileTypes: true })).filter(
    (entry) => entry.isFile() && entry.name.endsWith('.wav') && !entry.parentPath.includes('.incoming'),
  );
  return Promise.all(
    files.map(async (entry) =>
      createHash('sha256')
        .update(await readFile(path.join(entry.parentPath, entry.name)))
        .digest('hex'),
    ),
  );
}

const FOUND: Record<Exclude<Attack, 'swap' | 'wide'>, string> = {
  fifo: 'a FIFO',
  socket: 'a socket',
  'link-absolute': 'a symbolic link',
  'link-relative': 'a symbolic link',
};

describe('a converter taken over by its input', () => {
  it('the control: the same stand-in converts media without a marker, and the job is done', async () => {
    const job = await svc.waitForJob((await svc.submit(media.url('/honest.m4a'))).job_id, ['done', 'failed']);
    expect(job.error).toBeNull();
    expect(job.status).toBe('done');
    expect(await storedHashes()).toContain(job.result!.content_id);
  });

  it.each(Object.keys(FOUND) as Array<keyof typeof FOUND>)(
    'leaves %s at its output: refused at once, never followed nor waited on',
    async (attack) => {
      const before = await storedHashes();
      const job = await svc.waitForJob((await svc.submit(media.url(`/${attack}.m4a`))).job_id, ['done', 'failed']);
      expect(job.status).toBe('failed');
      expect(job.error).toMatchObject({
        code: 'conversion_failed',
        message: 'The conversion to WAV failed.',
        detail: `The converter left ${FOUND[attack]} instead of a WAV file.`,
      });
      // Nothing entered the store: not the link, not the WAV it pointed at.
      const outsideId = createHash('sha256')
        .update(await readFile(outsideWav))
        .digest('hex');
      expect(await storedHashes()).toEqual(before);
      expect(before).not.toContain(outsideId);
    },
  );

  it('two FIFOs at once hold no worker: a job after them is done', async () => {
    const jobs = await Promise.all([svc.submit(media.url('/fifo.m4a?a')), svc.submit(media.url('/fifo.m4a?b'))]);
    const ended = await Promise.all(jobs.map((job) => svc.waitForJob(job.job_id, ['done', 'failed'])));
    expect(ended.map((job) => job.error?.code)).toEqual(['conversion_failed', 'conversion_failed']);
    const after = await svc.waitForJob((await svc.submit(media.url('/honest.m4a?after'))).job_id, ['done', 'failed']);
    expect(after.status).toBe('done');
    const health = await svc.request('/healthz');
    expect({ status: health.status, report: await health.json() }).toMatchObject({
      status: 200,
      report: { can_fetch: true },
    });
  });

  it('declares 4,096 channels in its WAV header: refused before anything is derived from it', async () => {
    const job = await svc.waitForJob((await svc.submit(media.url('/wide.m4a'))).job_id, ['done', 'failed']);
    expect(job.status).toBe('failed');
    expect(job.error).toMatchObject({
      code: 'conversion_failed',
      detail: 'The converter wrote a WAV of another format than the one asked for.',
    });
    expect(svc.logs).toContainEqual(
      expect.objectContaining({ msg: 'the converter wrote a WAV of another format than asked', channels: 4096 }),
    );
  });

  it('replaces a quiet decoy, once measured, with the real WAV: refused, so no loudness of another file is recorded', async () => {
    const job = await svc.waitForJob((await svc.submit(media.url('/swap.m4a'))).job_id, ['done', 'failed']);
    expect(job.status).toBe('failed');
    expect(job.error).toMatchObject({
      code: 'conversion_failed',
      detail: 'The converter replaced its output file while it was being read.',
    });
  });
});
