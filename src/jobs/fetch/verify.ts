import { jobError } from '../../job-errors.js';
import type { Converted } from './convert.js';
import { JobFailure, step, type FetchContext, type Outcome } from './step.js';

/**
 * Step 3 (of ./task.ts), verify: the WAV is the one asked for (16-bit integer PCM at 44.1 kHz, mono
 * or stereo: what a converter taken over by its media declares in its header bounds nothing
 * downstream, the waveform peaks' size among them), holds audio, and no more than MAX_DURATION_S of
 * it. The conversion ran a little past the limit (ffmpeg.DURATION_OVERRUN_S), so a WAV longer than
 * the limit means the media is longer, whatever its container claimed.
 */
export function verifyAudio(ctx: FetchContext, converted: Converted): Promise<Outcome<Converted>> {
  return step(() => {
    const { header } = converted;
    const asked =
      header.audioFormat === 1 &&
      header.bitsPerSample === 16 &&
      header.sampleRate === 44_100 &&
      (header.channels === 1 || header.channels === 2);
    if (!asked) {
      ctx.log.warn(
        {
          audio_format: header.audioFormat,
          bits: header.bitsPerSample,
          rate: header.sampleRate,
          channels: header.channels,
        },
        'the converter wrote a WAV of another format than asked',
      );
      throw new JobFailure(
        jobError('conversion_failed', {
          detail: 'The converter wrote a WAV of another format than the one asked for.',
        }),
      );
    }
    if (header.dataBytes === 0)
      throw new JobFailure(jobError('not_audio', { detail: 'The converter wrote a WAV without samples.' }));
    if (header.durationS > ctx.limits.maxDurationS) {
      throw new JobFailure(jobError('duration_exceeded', { values: { limit: ctx.limits.maxDurationS } }));
    }
    return converted;
  });
}
