import { jobError } from '../../job-errors.js';
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
      throw new JobFailure(jobError('not_audio', { detail: 'The converter wrote a WAV without samples.' }));
    if (header.durationS > ctx.limits.maxDurationS) {
      throw new JobFailure(jobError('duration_exceeded', { values: { limit: ctx.limits.maxDurationS } }));
    }
    return converted;
  });
}
