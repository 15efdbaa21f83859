import fs from 'node:fs/promises';
import path from 'node:path';
import * as ytdlp from '../../tools/ytdlp.js';
import type { Probed } from './probe.js';
import { JobFailure, step, type FetchContext, type Outcome } from './step.js';

/**
 * Step 3, download: yt-dlp fetches the best audio through the egress guard, replaying the probe's
 * info JSON (no second extraction), with the byte limit enforced while it downloads.
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

export function downloadMedia(ctx: FetchContext, deps: DownloadDeps, probed: Probed): Promise<Outcome<Downloaded>> {
  return step(async () => {
    const infoJsonPath = path.join(ctx.workDir, 'info.json');
    await fs.writeFile(infoJsonPath, probed.infoText, { mode: 0o600 });
    const downloadDir = path.join(ctx.workDir, 'download');
    await fs.mkdir(downloadDir);
    const maxBytes = ctx.limits.maxDownloadBytes;
    const tooLarge = () => new JobFailure({ code: 'file_too_large', message: `The download exceeds the limit of ${maxBytes} bytes and was stopped.` });
    let downloadedPath: string | undefined;
    let lastProgress = 0;
    const run = await ctx.runTool(
      'ytdlp',
      ytdlp.buildDownloadArgs({
        infoJsonPath,
        url: ctx.job.url,
        outputDir: downloadDir,
        ...ctx.ytdlpOptions,
        maxBytes,
        // Only formats fetched over HTTP(S) by yt-dlp itself, through the guard.
        format: ytdlp.GUARDED_FORMAT,
      }),
      {
        onStdoutLine: (line) => {
          const progress = ytdlp.parseProgressLine(line);
          if (progress) {
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
    );
    if (run.exitCode !== 0) throw new JobFailure(ytdlp.describeYtDlpFailure(run.stderrTail, ctx.hide));
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
      throw new JobFailure({ code: 'download_failed', message: 'The downloader reported success but produced no file.' });
    }
    if (downloaded.size > maxBytes) throw tooLarge();
    deps.onProgress(downloaded.size, downloaded.size);
    return { path: downloadedPath, bytes: downloaded.size };
  });
}
