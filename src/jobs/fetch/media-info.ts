import { jobError, type JobError } from '../../job-errors.js';
import { mediaAliasKey } from '../../store/aliases.js';
import { isGuardedProtocol } from '../../tools/ytdlp-args.js';
import { parseInfoJson, type MediaInfo } from '../../tools/ytdlp-output.js';
import { durationExceeded, JobFailure, type FetchLimits } from './step.js';

/**
 * What the download run's extraction says about the media (its info JSON, read before any byte
 * of media is downloaded): what will not be fetched is refused (playlists, live streams, media
 * offered only over protocols the guard cannot see, formats that would override the guard as
 * proxy, media too long), and the media alias key is named when one can be trusted.
 */
export interface Extracted {
  info: MediaInfo;
  mediaKey: string | undefined;
}

export const METADATA_INVALID: JobError = jobError('metadata_invalid');

/** Reads the info JSON's text and checks it; throws JobFailure with the refusal. */
export function checkExtracted(
  infoText: string,
  limits: Pick<FetchLimits, 'maxDurationS'>,
  hostsContacted: string[],
): Extracted {
  let info: MediaInfo;
  try {
    info = parseInfoJson(infoText);
  } catch {
    throw new JobFailure(METADATA_INVALID);
  }
  if (info.isPlaylist) {
    throw new JobFailure(jobError('playlist_not_supported'));
  }
  if (info.isLive) throw new JobFailure(jobError('live_stream'));
  // Formats fetched by an external program (rtmpdump, mpv...) would connect around the guard.
  if (info.protocols.length > 0 && !info.protocols.some(isGuardedProtocol)) {
    throw new JobFailure(
      jobError('unsupported_protocol', {
        detail: `The media is only offered over ${[...new Set(info.protocols)].slice(0, 5).join(', ')}; only HTTP(S), HLS and DASH are fetched.`,
      }),
    );
  }
  if (info.overridesProxy) {
    throw new JobFailure(
      jobError('direct_connection_refused', {
        detail:
          "The media's formats ask the downloader to replace its proxy (a Ytdl-request-proxy header), which would take it around the egress guard; nothing was downloaded.",
      }),
    );
  }
  if (info.durationS !== undefined && info.durationS > limits.maxDurationS)
    throw durationExceeded(info.durationS, limits.maxDurationS);
  return { info, mediaKey: trustedMediaKey(info, hostsContacted) };
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
