import type { Converted } from './convert.js';
import { JobFailure, step, type FetchContext, type Outcome } from './step.js';

/**
 * Step 5, verify: the WAV holds audio, and no more than MAX_DURATION_S of it. The conversion ran
 * a little past the limit (ffmpeg.DURATION_OVERRUN_S), so a WAV longer than the limit means the
 * media is longer, whatever its container claimed.
 */
export function verifyAudio(ctx: FetchContext, converted: Converted): Promise<Outcome<Converted>> {
  return step(() => {
    const { header } = converted;
    if (header.dataBytes === 0)
      throw new JobFailure({ code: 'not_audio', message: 'The downloaded file holds no audio.' });
    if (header.durationS > ctx.limits.maxDurationS) {
      throw new JobFailure({
        code: 'duration_exceeded',
        message: `The media lasts more than the limit of ${ctx.limits.maxDurationS} s.`,
      });
    }
    return converted;
  });
}
