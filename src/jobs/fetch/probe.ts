import { mediaAliasKey } from '../../store/aliases.js';
import { buildProbeArgs, isGuardedProtocol } from '../../tools/ytdlp-args.js';
import { describeYtDlpFailure } from '../../tools/ytdlp-failure.js';
import { parseInfoJson, withoutReplayedHeaders, type MediaInfo } from '../../tools/ytdlp-output.js';
import { abortAfter, durationExceeded, JobFailure, step, type FetchContext, type Outcome } from './step.js';

/**
 * Step 1, probe: yt-dlp's metadata run, no media. Refuses what will not be fetched (playlists,
 * live streams, media offered only over protocols the guard cannot see, media too long) before a
 * byte of it is downloaded, and names the media alias key when one can be trusted.
 */
export interface Probed {
  info: MediaInfo;
  /** The info JSON the download replays, without proxy overrides or cookies. */
  infoText: string;
  mediaKey: string | undefined;
}

/** yt-dlp's info JSON lists every format; a few MB at most for real sites. */
const MAX_INFO_JSON_BYTES = 32 * 1024 * 1024;
const MAX_PROBE_FILE_BYTES = 16 * 1024 * 1024;

export function probeMedia(ctx: FetchContext): Promise<Outcome<Probed>> {
  return step(async () => {
    const seconds = ctx.limits.metadataTimeoutMs / 1000;
    const probe = await ctx.runTool('ytdlp', buildProbeArgs({ url: ctx.job.url, ...ctx.ytdlpOptions }), {
      stdoutCaptureBytes: MAX_INFO_JSON_BYTES,
      // The info JSON goes to stdout: the metadata run writes no file of any size.
      maxFileBytes: MAX_PROBE_FILE_BYTES,
      stop: abortAfter(ctx.limits.metadataTimeoutMs, {
        code: 'metadata_timeout',
        message: `Reading the media's metadata took longer than ${seconds} s and was stopped.`,
      }),
    });
    if (probe.exitCode !== 0) throw new JobFailure(describeYtDlpFailure(probe.stderrTail, ctx.hide));
    let info: MediaInfo;
    let infoText: string;
    try {
      info = parseInfoJson(probe.stdout);
      infoText = withoutReplayedHeaders(probe.stdout);
    } catch {
      throw new JobFailure({
        code: 'metadata_invalid',
        message: 'The downloader returned metadata that could not be read.',
      });
    }
    if (info.isPlaylist) {
      throw new JobFailure({
        code: 'playlist_not_supported',
        message: 'The URL is a playlist; submit the URL of one item.',
      });
    }
    if (info.isLive) throw new JobFailure({ code: 'live_stream', message: 'Live streams cannot be fetched.' });
    // Formats fetched by an external program (rtmpdump, mpv...) would connect around the guard.
    if (info.protocols.length > 0 && !info.protocols.some(isGuardedProtocol)) {
      throw new JobFailure({
        code: 'unsupported_protocol',
        message: `The media is only offered over ${[...new Set(info.protocols)].slice(0, 5).join(', ')}; only HTTP(S), HLS and DASH are fetched.`,
      });
    }
    if (info.durationS !== undefined && info.durationS > ctx.limits.maxDurationS)
      throw durationExceeded(info.durationS, ctx.limits.maxDurationS);
    return { info, infoText, mediaKey: trustedMediaKey(info, ctx.hostsContacted()) };
  });
}

/**
 * The media alias key, or undefined where the extractor's identity cannot be trusted across URLs:
 * the generic extractor (its id is a file name), and any media whose page is not on a host the
 * downloader actually fetched from through the guard (an extractor's output can name any page).
 */
export function trustedMediaKey(info: MediaInfo, hostsContacted: string[]): string | undefined {
  if (info.extractorKey.toLowerCase() === 'generic' || info.webpageUrl === undefined) return undefined;
  let page: URL;
  try {
    page = new URL(info.webpageUrl);
  } catch {
    return undefined;
  }
  if (page.protocol !== 'http:' && page.protocol !== 'https:') return undefined;
  const bare = (host: string) =>
    host
      .replace(/^\[|\]$/g, '')
      .replace(/\.$/, '')
      .toLowerCase();
  if (!hostsContacted.map(bare).includes(bare(page.hostname))) return undefined;
  const site = page.port === '' ? bare(page.hostname) : `${bare(page.hostname)}:${page.port}`;
  return mediaAliasKey(info.extractorKey, site, info.mediaId);
}
