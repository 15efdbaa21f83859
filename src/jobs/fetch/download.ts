import fs from 'node:fs/promises';
import path from 'node:path';
import { buildDownloadArgs, GUARDED_FORMAT } from '../../tools/ytdlp-args.js';
import { describeYtDlpFailure } from '../../tools/ytdlp-failure.js';
import { parseProgressLine } from '../../tools/ytdlp-output.js';
import type { Probed } from './probe.js';
import { JobFailure, step, type FetchContext, type Outcome } from './step.js';

/**
 * Step 3, download: yt-dlp fetches the best audio through the egress guard, replaying the probe's
 * info JSON (no second extraction), with the byte limit enforced while it downloads and a
 * download that stalls (an origin that trickles, or sends nothing) stopped early.
 */
export interface Downloaded {
  path: string;
  bytes: number;
}

export interface DownloadDeps {
  /** Called with the bytes so far at most every PROGRESS_INTERVAL_MS, and once at the end. */
  onProgress: (bytes: number, totalBytes: number | null) => void;
  /** Refusals of the egress guard so far, for this job. */
  refusals: () => unknown[];
}

const PROGRESS_INTERVAL_MS = 500;
const FILE_SIZE_SLACK_BYTES = 1024 * 1024;
/** How many times per stall window the bytes so far are sampled. */
const STALL_SAMPLES_PER_WINDOW = 5;

/**
 * Aborts its signal, with download_stalled as the reason, once the bytes reported through
 * `progress` grew by fewer than `minBytes` (at least one) over the last `windowMs`.
 */
export function watchForStall({ windowMs, minBytes }: { windowMs: number; minBytes: number }) {
  const stalled = new AbortController();
  let bytes = 0;
  const samples: Array<{ at: number; bytes: number }> = [{ at: performance.now(), bytes: 0 }];
  const timer = setInterval(() => {
    const now = performance.now();
    while (samples.length > 1 && now - samples[1]!.at >= windowMs) samples.shift();
    const oldest = samples[0]!;
    if (now - oldest.at >= windowMs && bytes - oldest.bytes < Math.max(1, minBytes)) {
      clearInterval(timer);
      stalled.abort({
        code: 'download_stalled',
        message: `The download gained fewer than ${Math.max(1, minBytes)} bytes in ${windowMs / 1000} s and was stopped.`,
      });
    }
    samples.push({ at: now, bytes });
  }, windowMs / STALL_SAMPLES_PER_WINDOW);
  return {
    signal: stalled.signal,
    progress(downloadedBytes: number) {
      bytes = Math.max(bytes, downloadedBytes);
    },
    stop: () => clearInterval(timer),
  };
}

export function downloadMedia(ctx: FetchContext, deps: DownloadDeps, probed: Probed): Promise<Outcome<Downloaded>> {
  return step(async () => {
    const infoJsonPath = path.join(ctx.workDir, 'info.json');
    await fs.writeFile(infoJsonPath, probed.infoText, { mode: 0o600 });
    const downloadDir = path.join(ctx.workDir, 'download');
    await fs.mkdir(downloadDir);
    const maxBytes = ctx.limits.maxDownloadBytes;
    const tooLarge = () =>
      new JobFailure({
        code: 'file_too_large',
        message: `The download exceeds the limit of ${maxBytes} bytes and was stopped.`,
      });
    let downloadedPath: string | undefined;
    let lastProgress = 0;
    const stall = watchForStall(ctx.limits.downloadStall);
    const run = await ctx
      .runTool(
        'ytdlp',
        buildDownloadArgs({
          infoJsonPath,
          url: ctx.job.url,
          outputDir: downloadDir,
          ...ctx.ytdlpOptions,
          maxBytes,
          // Only formats fetched over HTTP(S) by yt-dlp itself, through the guard.
          format: GUARDED_FORMAT,
        }),
        {
          // Room for the last chunk past the byte limit: the progress check below stops it first.
          maxFileBytes: maxBytes + FILE_SIZE_SLACK_BYTES,
          stop: stall.signal,
          onStdoutLine: (line) => {
            const progress = parseProgressLine(line);
            if (progress) {
              stall.progress(progress.downloadedBytes);
              // Enforced while downloading, whatever the origin announced (chunked responses have no
              // size for --max-filesize to check): throwing here kills yt-dlp's process group.
              if (progress.downloadedBytes > maxBytes) throw tooLarge();
              const now = Date.now();
              if (now - lastProgress >= PROGRESS_INTERVAL_MS) {
                lastProgress = now;
                deps.onProgress(progress.downloadedBytes, progress.totalBytes);
              }
            } else if (path.isAbsolute(line.trim())) {
              downloadedPath = line.trim();
            }
          },
        },
      )
      .finally(stall.stop);
    if (run.exitCode !== 0) throw new JobFailure(describeYtDlpFailure(run.stderrTail, ctx.hide));
    // A destination refused on the way (a segment, a redirect) fails the job even when yt-dlp
    // carried on without it; the task reports the refusal itself.
    if (deps.refusals().length > 0) throw new Error('destination refused during download');
    if (!downloadedPath) {
      // yt-dlp's one silent way out (its HTTP downloader, read in 2023.03.04): an announced size
      // over --max-filesize, reported under --quiet by nothing but exit 0 and no file. Its other
      // failures raise, exit non-zero and say why on stderr.
      throw new JobFailure({ code: 'file_too_large', message: `The download exceeds the limit of ${maxBytes} bytes.` });
    }
    const downloaded = await fs.stat(downloadedPath).catch(() => null);
    if (!downloaded?.isFile() || path.dirname(path.resolve(downloadedPath)) !== downloadDir) {
      throw new JobFailure({
        code: 'download_failed',
        message: 'The downloader reported success but produced no file.',
      });
    }
    if (downloaded.size > maxBytes) throw tooLarge();
    deps.onProgress(downloaded.size, downloaded.size);
    return { path: downloadedPath, bytes: downloaded.size };
  });
}
