import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Db } from '../db/client.js';
import type { JobRow } from '../db/schema.js';
import { mediaAliasKey, resolveAlias, setAlias } from '../store/aliases.js';
import { cacheEntryFor, recordCacheEntry, SOURCE_WAV_KIND } from '../store/cache-entries.js';
import type { ContentStore } from '../store/content-store.js';
import { AUDIO_ARTIFACT_NAME } from '../store/layout.js';
import { recordUse } from '../store/usage.js';
import * as ffmpeg from '../tools/ffmpeg.js';
import { REFUSED_CONNECT, type Sandbox, type ToolNetwork } from '../sandbox/sandbox.js';
import { parseWavHeader } from '../tools/wav.js';
import * as ytdlp from '../tools/ytdlp.js';
import { markDone, markFailed, recordMediaIdentity, recordProgress, type JobError } from './queue.js';
import type { JobContext } from './worker-pool.js';

/**
 * The fetch task: one job from URL to stored WAV.
 *   1. yt-dlp metadata step (no media): extractor and media id. A media identity that is
 *      already stored (another URL of the same video) ends the job here.
 *   2. yt-dlp download of the best audio, from the info JSON of step 1 (no second extraction).
 *   3. ffprobe: the download must hold an audio stream.
 *   4. ffmpeg: PCM 16-bit WAV at 44.1 kHz, mono stays mono, more channels become stereo.
 *   5. content store (atomic, content-addressed), cache row, aliases, job done: one transaction.
 * Everything happens in a per-job folder under the work dir, removed at the end whatever happens.
 */
export interface EgressSession {
  proxyUrlAt(authority: string): string;
  refusals(): Array<{ host: string; port: number; code: string; message: string }>;
  hostsContacted(): string[];
  close(): void;
}

export interface FetchTaskDeps {
  db: Db;
  store: ContentStore;
  now: () => number;
  /** Runs the tools, confined to the egress guard (or not, when the operator turned that off). */
  sandbox: Pick<Sandbox, 'mode' | 'guardAuthority' | 'run'>;
  tools: { ytdlp: string; ffmpeg: string; ffprobe: string };
  workDir: string;
  limits: { timeoutMs: number; maxDownloadBytes: number; maxDurationS: number };
  /** Every connection the downloader makes goes through this guard, when present. */
  openEgressSession?: (label: string) => EgressSession;
  /** Told about each stored content (the store's size cap hooks in here). */
  onStored?: (contentId: string, bytes: number) => void;
  onDownloaded?: (bytes: number) => void;
}

class JobFailure extends Error {
  constructor(readonly error: JobError) {
    super(error.message);
  }
}

const PROGRESS_WRITE_INTERVAL_MS = 500;
/** What ffmpeg (at -loglevel error) says about an input it could only partly decode. */
const CORRUPT_INPUT = /partial file|Error while decoding stream|Invalid data found when processing input/i;
const STORAGE_FULL: JobError = { code: 'storage_full', message: 'The service has no storage space left for this file.' };
/** yt-dlp's info JSON lists every format; a few MB at most for real sites. */
const MAX_INFO_JSON_BYTES = 32 * 1024 * 1024;

export function createFetchTask(deps: FetchTaskDeps) {
  return async function runFetchJob(job: JobRow, ctx: JobContext): Promise<void> {
    // One folder per attempt: nothing of an interrupted attempt can mix with this one.
    const workDir = path.join(deps.workDir, `${job.id}.${job.attempts}`);
    const egress = deps.openEgressSession?.(job.id);
    const deadline = AbortSignal.timeout(deps.limits.timeoutMs);
    const signal = AbortSignal.any([ctx.signal, deadline]);
    const proxyUrl = egress?.proxyUrlAt(deps.sandbox.guardAuthority);
    const hide = [workDir, deps.workDir, deps.store.root, ...(proxyUrl ? [proxyUrl] : [])];
    const proxyConfigFile = path.join(workDir, 'proxy.conf');
    // An empty folder as yt-dlp's ffmpeg: it must download by itself, over HTTP(S), or not at all.
    const noFfmpegDir = path.join(workDir, 'no-ffmpeg');
    const ytdlpOptions = { noFfmpegDir, ...(proxyUrl ? { proxyConfigFile } : {}) };
    /** A confined tool's first attempt to connect around the guard, as it reported it. */
    let directAttempt: string | null = null;
    try {
      await fs.rm(workDir, { recursive: true, force: true });
      await fs.mkdir(noFfmpegDir, { recursive: true });
      if (proxyUrl) await fs.writeFile(proxyConfigFile, ytdlp.proxyConfigText(proxyUrl), { mode: 0o600, flag: 'wx' });
      await fetchToStore();
    } catch (err) {
      if (ctx.signal.aborted) {
        ctx.log.info({ reason: ctx.signal.reason }, 'job aborted');
      } else {
        const error = toJobError(err);
        ctx.log.warn({ code: error.code }, 'job failed');
        markFailed(deps.db, job.id, error, deps.now());
      }
    } finally {
      egress?.close();
      await fs.rm(workDir, { recursive: true, force: true }).catch(() => {});
    }

    function toJobError(err: unknown): JobError {
      const refusal = egress?.refusals()[0];
      if (refusal) return { code: 'destination_refused', message: refusal.message };
      if (directAttempt !== null) {
        return {
          code: 'direct_connection_refused',
          message: `The downloader tried to connect around the egress guard and the sandbox refused it (${directAttempt}).`,
        };
      }
      if (deadline.aborted) {
        return { code: 'fetch_timeout', message: `The fetch took longer than ${deps.limits.timeoutMs / 1000} s and was stopped.` };
      }
      if (err instanceof JobFailure) return err.error;
      const errno = (err as NodeJS.ErrnoException).code;
      if (errno === 'ENOSPC' || errno === 'EDQUOT') return STORAGE_FULL;
      ctx.log.error({ err }, 'unexpected error in fetch task');
      return { code: 'internal_error', message: 'The fetch failed for an internal reason.' };
    }

    async function runTool(
      name: 'ytdlp' | 'ffmpeg' | 'ffprobe',
      args: string[],
      output: { onStdoutLine?: (line: string) => void; stdoutCaptureBytes?: number } = {},
    ) {
      // Only the downloader talks to the network (through the guard); the conversion reads a file.
      const network: ToolNetwork = name === 'ytdlp' ? 'guard' : 'none';
      const result = await deps.sandbox.run({
        command: deps.tools[name],
        args,
        cwd: workDir,
        signal,
        network,
        ...output,
        onStderrLine: deps.sandbox.mode === 'netns' ? noticeDirectAttempt : undefined,
      });
      if (result.confinementFailure !== null) {
        ctx.log.error({ reason: result.confinementFailure }, 'tool confinement failed');
        throw new JobFailure({ code: 'confinement_unavailable', message: 'The tools could not be confined to the egress guard, so nothing was fetched.' });
      }
      if (directAttempt !== null) throw new Error('a tool tried to connect around the egress guard');
      if (result.notFound) {
        throw new JobFailure(
          name === 'ytdlp'
            ? { code: 'downloader_missing', message: 'The downloader (yt-dlp) is not installed or not executable.' }
            : { code: 'converter_missing', message: `The converter (${name}) is not installed or not executable.` },
        );
      }
      if (signal.aborted) throw new Error('aborted');
      return result;
    }

    /** In a confined tool's output, an errno of a refused connect() can only be a way around the guard. */
    function noticeDirectAttempt(line: string): void {
      const match = REFUSED_CONNECT.exec(line);
      if (match && directAttempt === null) directAttempt = match[0];
    }

    async function fetchToStore(): Promise<void> {
      // 1. Metadata, no media.
      const probe = await runTool('ytdlp', ytdlp.buildProbeArgs({ url: job.url, ...ytdlpOptions }), {
        stdoutCaptureBytes: MAX_INFO_JSON_BYTES,
      });
      if (probe.exitCode !== 0) {
        throw new JobFailure(ytdlp.describeYtDlpFailure(probe.stderrTail, hide));
      }
      let info: ReturnType<typeof ytdlp.parseInfoJson>;
      let infoText: string;
      try {
        info = ytdlp.parseInfoJson(probe.stdout);
        infoText = ytdlp.withoutProxyOverrides(probe.stdout);
      } catch {
        throw new JobFailure({ code: 'metadata_invalid', message: 'The downloader returned metadata that could not be read.' });
      }
      if (info.isPlaylist) {
        throw new JobFailure({ code: 'playlist_not_supported', message: 'The URL is a playlist; submit the URL of one item.' });
      }
      if (info.isLive) throw new JobFailure({ code: 'live_stream', message: 'Live streams cannot be fetched.' });
      // Formats fetched by an external program (rtmpdump, mpv...) would connect around the guard.
      if (info.protocols.length > 0 && !info.protocols.some(ytdlp.isGuardedProtocol)) {
        throw new JobFailure({
          code: 'unsupported_protocol',
          message: `The media is only offered over ${[...new Set(info.protocols)].slice(0, 5).join(', ')}; only HTTP(S), HLS and DASH are fetched.`,
        });
      }
      if (info.durationS !== undefined && info.durationS > deps.limits.maxDurationS) {
        throw new JobFailure({
          code: 'duration_exceeded',
          message: `The media lasts ${Math.round(info.durationS)} s, more than the limit of ${deps.limits.maxDurationS} s.`,
        });
      }
      recordMediaIdentity(deps.db, job.id, info.extractorKey, info.mediaId);
      const mediaKey = trustedMediaKey(info, egress?.hostsContacted() ?? []);
      if (mediaKey) {
        const known = resolveAlias(deps.db, 'media', mediaKey);
        const reused =
          known !== undefined &&
          deps.db.transaction(() => {
            if (!deps.store.hasSync(known, AUDIO_ARTIFACT_NAME)) return false;
            const now = deps.now();
            if (!markDone(deps.db, job.id, known, now)) return false;
            setAlias(deps.db, 'url', job.urlKey, known, now);
            // Reused content is used content: the next eviction must not take it for cold.
            recordUse(deps.db, known, now);
            return true;
          });
        if (reused) {
          ctx.log.info({ content_id: known, media: mediaKey }, 'media already stored under another URL: job done');
          return;
        }
      }

      // 2. Download the best audio.
      const infoJsonPath = path.join(workDir, 'info.json');
      await fs.writeFile(infoJsonPath, infoText);
      const downloadDir = path.join(workDir, 'download');
      await fs.mkdir(downloadDir);
      let downloadedPath: string | undefined;
      let lastProgressWrite = 0;
      const maxBytes = deps.limits.maxDownloadBytes;
      const tooLarge = () =>
        new JobFailure({ code: 'file_too_large', message: `The download exceeds the limit of ${maxBytes} bytes and was stopped.` });
      const download = await runTool(
        'ytdlp',
        ytdlp.buildDownloadArgs({
          infoJsonPath,
          url: job.url,
          outputDir: downloadDir,
          ...ytdlpOptions,
          maxBytes: deps.limits.maxDownloadBytes,
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
            if (now - lastProgressWrite >= PROGRESS_WRITE_INTERVAL_MS) {
              lastProgressWrite = now;
              recordProgress(deps.db, job.id, progress.downloadedBytes, progress.totalBytes);
            }
          } else if (path.isAbsolute(line.trim())) {
            downloadedPath = line.trim();
          }
          },
        },
      );
      if (download.exitCode !== 0) {
        throw new JobFailure(ytdlp.describeYtDlpFailure(download.stderrTail, hide));
      }
      // A destination refused on the way (a segment, a redirect) fails the job even when yt-dlp
      // carried on without it (it skips unavailable HLS fragments).
      if (egress && egress.refusals().length > 0) throw new Error('destination refused during download');
      const downloaded = downloadedPath ? await fs.stat(downloadedPath).catch(() => null) : null;
      if (!downloadedPath) {
        // yt-dlp's one silent way out (its HTTP downloader, read in 2023.03.04): an announced size
        // over --max-filesize, reported under --quiet by nothing but exit 0 and no file. Its other
        // failures raise, exit non-zero and say why on stderr.
        throw new JobFailure({ code: 'file_too_large', message: `The download exceeds the limit of ${maxBytes} bytes.` });
      }
      if (!downloaded?.isFile() || path.dirname(path.resolve(downloadedPath)) !== downloadDir) {
        throw new JobFailure({ code: 'download_failed', message: 'The downloader reported success but produced no file.' });
      }
      if (downloaded.size > maxBytes) throw tooLarge();
      recordProgress(deps.db, job.id, downloaded.size, downloaded.size);

      // 3. It must be audio.
      const ffprobeRun = await runTool('ffprobe', ffmpeg.buildProbeArgs(downloadedPath), { stdoutCaptureBytes: 1024 * 1024 });
      const media = ffprobeRun.exitCode === 0 ? safeParseProbe(ffprobeRun.stdout) : undefined;
      if (!media) {
        // Not media at all, or media too damaged to open (a truncated MP4 without its index, say).
        const reason = ytdlp.cleanToolMessage(ffprobeRun.stderrTail, hide).split('\n').pop()?.replace(/^(?:file:)?\S*\[(?:path|redacted)\]\S*:\s*/, '');
        throw new JobFailure({
          code: 'not_audio',
          message: `The downloaded file could not be read as audio${reason ? ` (${reason.slice(0, 200)})` : ''}.`,
        });
      }
      if (media.audioStreams === 0) {
        throw new JobFailure({ code: 'not_audio', message: 'The downloaded file holds no audio stream.' });
      }
      if (media.durationS !== null && media.durationS > deps.limits.maxDurationS) {
        throw new JobFailure({
          code: 'duration_exceeded',
          message: `The media lasts ${Math.round(media.durationS)} s, more than the limit of ${deps.limits.maxDurationS} s.`,
        });
      }

      // 4. Convert under our own control.
      const wavPath = path.join(workDir, `${randomUUID()}.wav`);
      const convert = await runTool(
        'ffmpeg',
        ffmpeg.buildConvertArgs({ input: downloadedPath, output: wavPath, inputChannels: media.channels ?? 2, maxDurationS: deps.limits.maxDurationS }),
      );
      if (convert.exitCode !== 0) {
        if (/No space left on device/i.test(convert.stderrTail)) throw new JobFailure(STORAGE_FULL);
        throw new JobFailure({ code: 'conversion_failed', message: ytdlp.cleanToolMessage(convert.stderrTail, hide) || 'The conversion to WAV failed.' });
      }
      // ffmpeg exits 0 on a damaged or cut-off input and writes what it could decode: that partial
      // audio must not be stored as the URL's content.
      if (CORRUPT_INPUT.test(convert.stderrTail)) {
        throw new JobFailure({
          code: 'media_corrupt',
          message: `The downloaded media is damaged or incomplete: ${ytdlp.cleanToolMessage(convert.stderrTail, hide)}`.slice(0, 500),
        });
      }
      const header = await readWavHeader(wavPath);

      // 5. Store, then record everything in one transaction. The store pins the content until
      // it is recorded, so eviction cannot remove it (or an identical copy stored earlier) now.
      if (signal.aborted) throw new Error('aborted');
      deps.onDownloaded?.(downloaded.size);
      const stored = await deps.store.put(wavPath, AUDIO_ARTIFACT_NAME);
      try {
        const now = deps.now();
        const outcome = deps.db.transaction(() => {
          // Never a row without its file, whoever removed it.
          if (!deps.store.hasSync(stored.contentId, AUDIO_ARTIFACT_NAME)) return 'vanished' as const;
          // A job canceled meanwhile is no longer running: then nothing is recorded.
          if (!markDone(deps.db, job.id, stored.contentId, now)) return 'canceled' as const;
          recordCacheEntry(
            deps.db,
            {
              contentId: stored.contentId,
              name: AUDIO_ARTIFACT_NAME,
              kind: SOURCE_WAV_KIND,
              bytes: stored.bytes,
              contentType: 'audio/wav',
              sampleRate: header.sampleRate,
              channels: header.channels,
              durationS: header.durationS,
            },
            now,
          );
          setAlias(deps.db, 'url', job.urlKey, stored.contentId, now);
          if (mediaKey) setAlias(deps.db, 'media', mediaKey, stored.contentId, now);
          return 'committed' as const;
        });
        if (outcome === 'vanished') throw new Error('stored content vanished before it was recorded');
        if (outcome === 'committed') {
          ctx.log.info({ content_id: stored.contentId, bytes: stored.bytes, reused: stored.reused }, 'job done');
          deps.onStored?.(stored.contentId, stored.bytes);
        } else {
          // Canceled while storing: the new file goes, unless another job is storing the same
          // bytes (it holds a pin too) or they are recorded. Check and removal are synchronous.
          stored.release();
          if (!stored.reused && !deps.store.isPinned(stored.contentId) && !cacheEntryFor(deps.db, stored.contentId, AUDIO_ARTIFACT_NAME)) {
            deps.store.removeSync(stored.contentId);
          }
        }
      } finally {
        stored.release();
      }
    }
  };
}

/**
 * The media alias key, or undefined where the extractor's identity cannot be trusted across URLs:
 * the generic extractor (its id is a file name), and any media whose page is not on a host the
 * downloader actually fetched from through the guard (an extractor's output can name any page).
 */
function trustedMediaKey(info: ytdlp.MediaInfo, hostsContacted: string[]): string | undefined {
  if (info.extractorKey.toLowerCase() === 'generic' || info.webpageUrl === undefined) return undefined;
  let page: URL;
  try {
    page = new URL(info.webpageUrl);
  } catch {
    return undefined;
  }
  if (page.protocol !== 'http:' && page.protocol !== 'https:') return undefined;
  const bare = (host: string) => host.replace(/^\[|\]$/g, '').replace(/\.$/, '').toLowerCase();
  if (!hostsContacted.map(bare).includes(bare(page.hostname))) return undefined;
  const site = page.port === '' ? bare(page.hostname) : `${bare(page.hostname)}:${page.port}`;
  return mediaAliasKey(info.extractorKey, site, info.mediaId);
}

function safeParseProbe(text: string): ReturnType<typeof ffmpeg.parseProbe> | undefined {
  try {
    return ffmpeg.parseProbe(text);
  } catch {
    return undefined;
  }
}

async function readWavHeader(file: string) {
  const handle = await fs.open(file, 'r');
  try {
    const buf = Buffer.alloc(64 * 1024);
    const { bytesRead } = await handle.read(buf, 0, buf.length, 0);
    return parseWavHeader(buf.subarray(0, bytesRead));
  } catch (err) {
    throw new JobFailure({ code: 'conversion_failed', message: 'The converter produced no valid WAV file.' });
  } finally {
    await handle.close();
  }
}
