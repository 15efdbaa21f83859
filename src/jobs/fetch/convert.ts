import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import * as ffmpeg from '../../tools/ffmpeg.js';
import { parseWavHeader, type WavHeader } from '../../tools/wav.js';
import { cleanToolMessage } from '../../tools/ytdlp.js';
import type { Downloaded } from './download.js';
import { JobFailure, step, STORAGE_FULL, type FetchContext, type Outcome } from './step.js';

/** Step 5, convert: ffmpeg (confined, no network) to PCM 16-bit WAV at 44.1 kHz. */
export interface Converted {
  wavPath: string;
  header: WavHeader;
}

/** What ffmpeg (at -loglevel error) says about an input it could only partly decode. */
const CORRUPT_INPUT = /partial file|Error while decoding stream|Invalid data found when processing input/i;

export function convertToWav(ctx: FetchContext, downloaded: Downloaded, audio: ffmpeg.ProbeSummary): Promise<Outcome<Converted>> {
  return step(async () => {
    const wavPath = path.join(ctx.workDir, `${randomUUID()}.wav`);
    const run = await ctx.runTool(
      'ffmpeg',
      ffmpeg.buildConvertArgs({ input: downloaded.path, output: wavPath, inputChannels: audio.channels ?? 2, maxDurationS: ctx.limits.maxDurationS }),
    );
    if (run.exitCode !== 0) {
      if (/No space left on device/i.test(run.stderrTail)) throw new JobFailure(STORAGE_FULL);
      throw new JobFailure({ code: 'conversion_failed', message: cleanToolMessage(run.stderrTail, ctx.hide) || 'The conversion to WAV failed.' });
    }
    // ffmpeg exits 0 on a damaged or cut-off input and writes what it could decode: that partial
    // audio must not be stored as the URL's content.
    if (CORRUPT_INPUT.test(run.stderrTail)) {
      throw new JobFailure({
        code: 'media_corrupt',
        message: `The downloaded media is damaged or incomplete: ${cleanToolMessage(run.stderrTail, ctx.hide)}`.slice(0, 500),
      });
    }
    return { wavPath, header: await readWavHeader(wavPath) };
  });
}

async function readWavHeader(file: string): Promise<WavHeader> {
  const handle = await fs.open(file, 'r');
  try {
    const buf = Buffer.alloc(64 * 1024);
    const { bytesRead } = await handle.read(buf, 0, buf.length, 0);
    return parseWavHeader(buf.subarray(0, bytesRead));
  } catch {
    throw new JobFailure({ code: 'conversion_failed', message: 'The converter produced no valid WAV file.' });
  } finally {
    await handle.close();
  }
}
