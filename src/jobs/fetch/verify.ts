import * as ffmpeg from '../../tools/ffmpeg.js';
import { cleanToolMessage } from '../../tools/ytdlp.js';
import type { Downloaded } from './download.js';
import { durationExceeded, JobFailure, step, type FetchContext, type Outcome } from './step.js';

/** Step 4, verify: ffprobe (confined, local files of media containers only) says it is audio. */
export function verifyAudio(ctx: FetchContext, downloaded: Downloaded): Promise<Outcome<ffmpeg.ProbeSummary>> {
  return step(async () => {
    const run = await ctx.runTool('ffprobe', ffmpeg.buildProbeArgs(downloaded.path), { stdoutCaptureBytes: 1024 * 1024 });
    const media = run.exitCode === 0 ? safeParseProbe(run.stdout) : undefined;
    if (!media) {
      // Not media at all, or media too damaged to open (a truncated MP4 without its index, say).
      const reason = cleanToolMessage(run.stderrTail, ctx.hide)
        .split('\n')
        .pop()
        ?.replace(/^(?:file:)?\S*\[(?:path|redacted)\]\S*:\s*/, '');
      throw new JobFailure({
        code: 'not_audio',
        message: `The downloaded file could not be read as audio${reason ? ` (${reason.slice(0, 200)})` : ''}.`,
      });
    }
    if (media.audioStreams === 0) throw new JobFailure({ code: 'not_audio', message: 'The downloaded file holds no audio stream.' });
    if (media.durationS !== null && media.durationS > ctx.limits.maxDurationS) throw durationExceeded(media.durationS, ctx.limits.maxDurationS);
    return media;
  });
}

function safeParseProbe(text: string): ffmpeg.ProbeSummary | undefined {
  try {
    return ffmpeg.parseProbe(text);
  } catch {
    return undefined;
  }
}
