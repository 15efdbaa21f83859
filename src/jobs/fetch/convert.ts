import fs, { type FileHandle } from 'node:fs/promises';
import { createLoudnessMeter, type Loudness } from '../../audio/loudness.js';
import * as ffmpeg from '../../tools/ffmpeg.js';
import { MAX_TAGS_BYTES, parseFfmetadata, type FileTags } from '../../tools/ffmpeg-tags.js';
import { incompleteWav, parseWavHeader, type WavHeader } from '../../tools/wav.js';
import { jobError, type JobErrorCode } from '../../job-errors.js';
import type { SandboxedResult } from '../../sandbox/sandbox.js';
import { cleanToolMessage, toolOutputForLog } from '../../tools/tool-message.js';
import { NotRegularFile, openRegularFile } from '../../tools/regular-file.js';
import { followFile } from './follow-file.js';
import {
  JobFailure,
  step,
  STORAGE_FULL,
  type FetchContext,
  type FetchLimits,
  type Outcome,
  type StartedRun,
} from './step.js';
import { newWavPath, tagsPathOf } from './work-folder.js';

/**
 * Step 2 (of ./task.ts), convert: ffmpeg (confined, no network, local files of media containers
 * only) to PCM 16-bit WAV at 44.1 kHz. It is also the check that the download is audio: what ffmpeg
 * cannot open, or opens without finding an audio stream, fails with not_audio; what it can only
 * partly decode, with media_corrupt. Only a whole WAV leaves this step: a write error fails it
 * whatever ffmpeg's exit status (it exits 0 when its trailer cannot be written), and so does a file
 * whose size disagrees with its header.
 *
 * With ctx.audioAnalysis.loudness, the WAV's EBU R128 loudness is measured as ffmpeg writes it
 * (../../audio/loudness.ts, reading behind the writer: ./follow-file.ts), so the meter's work
 * overlaps the conversion on another core instead of following it. The meter sees the header
 * ffmpeg writes first (its sizes unknown yet), then the data chunk; a WAV leaves this step only
 * when its data chunk ends the file, so the meter has seen exactly the audio stored.
 */
export interface Converted {
  wavPath: string;
  header: WavHeader;
  /** Absent when not asked for; null for a WAV with no loudness (digital silence). */
  loudness?: Loudness | null;
  /** The input's own tags, as the same ffmpeg run wrote them beside the WAV; null when it wrote none. */
  tags: FileTags | null;
}

/** What ffmpeg (at -loglevel error) says about an input it could only partly decode. */
const CORRUPT_INPUT = /partial file|Error while decoding stream|Invalid data found when processing input/i;
/** ffmpeg's words for an input with nothing to map at 0:a:0. */
const NO_AUDIO_STREAM = /matches no streams/i;
/** A write refused for want of space, in ffmpeg's words (strerror of ENOSPC and EDQUOT). */
const NO_SPACE = /No space left on device|Disk quota exceeded/i;
/** Below this much free space, a WAV cut short is taken to have been cut by a full volume. */
const NEARLY_FULL_BYTES = 16 * 1024 * 1024;

/** An ffmpeg started before its input (./waiting-converter.ts): the FIFO it reads, the WAV it writes. */
export interface StartedConversion extends StartedRun {
  fifo: string;
  wavPath: string;
}

/**
 * What is converted: the whole download, or the download handed over as it grows, through a FIFO
 * (an ffmpeg started now reads it) or to the converter started before the job, which reads its own.
 */
export type StreamedInput = { fifo: string; stop: AbortSignal } | { started: StartedConversion; stop: AbortSignal };
export type ConversionInput = { file: string } | StreamedInput;

/**
 * Converts `input`: a file (the whole download), or the download handed over as it grows
 * (./convert-while-downloading.ts), with `stop`, which, aborted with a JobError as its reason,
 * stops ffmpeg and fails the step with that error. The converter started before the job writes
 * its WAV in its own folder.
 */
export function convertToWav(ctx: FetchContext, input: ConversionInput): Promise<Outcome<Converted>> {
  return step(async () => {
    const wavPath = 'started' in input ? input.started.wavPath : newWavPath(ctx.workDir);
    const meter = ctx.audioAnalysis?.loudness ? createLoudnessMeter() : undefined;
    const follower = meter ? followFile(wavPath, (bytes) => meter.update(bytes)) : undefined;
    try {
      const { identity, ...converted } = await convert(ctx, input, wavPath);
      if (!meter || !follower) return converted;
      await follower.finish(converted.header.dataOffset + converted.header.dataBytes);
      // The file measured must be the file stored: a converter that wrote a decoy and then put
      // another file at its path is caught here.
      const measured = follower.opened();
      if (measured?.dev !== identity.dev || measured.ino !== identity.ino) {
        ctx.log.warn('the converter replaced its output while it was being measured');
        throw new JobFailure(
          jobError('conversion_failed', { detail: 'The converter replaced its output file while it was being read.' }),
        );
      }
      return { ...converted, loudness: meter.finish() };
    } finally {
      await follower?.abandon();
    }
  });
}

/**
 * ffmpeg's arguments for a conversion under the job's limits (../../tools/ffmpeg.ts), with the
 * input's tags written beside the WAV (./work-folder.ts, tagsPathOf).
 */
export function conversionArgs(
  limits: FetchLimits,
  io: Pick<ffmpeg.ConvertArgsOptions, 'input' | 'fedThroughFifo' | 'output'>,
): string[] {
  return ffmpeg.buildConvertArgs({
    ...io,
    tagsOutput: tagsPathOf(io.output),
    maxDurationS: limits.maxDurationS,
    maxAllocBytes: limits.tool.memoryBytes,
  });
}

async function convert(
  ctx: FetchContext,
  input: ConversionInput,
  wavPath: string,
): Promise<Converted & { identity: { dev: number; ino: number } }> {
  const given =
    'file' in input
      ? { input: input.file }
      : { input: 'started' in input ? input.started.fifo : input.fifo, fedThroughFifo: true };
  const maxFileBytes = ctx.limits.maxOutputBytes;
  const run =
    'started' in input
      ? await ctx.adoptConversion(input.started, { maxFileBytes, stop: input.stop })
      : await ctx.runTool('ffmpeg', conversionArgs(ctx.limits, { ...given, output: wavPath }), {
          maxFileBytes,
          ...('stop' in input ? { stop: input.stop } : {}),
        });
  if (NO_SPACE.test(run.stderrTail)) throw new JobFailure(STORAGE_FULL);
  if (run.exitCode !== 0) {
    // ffmpeg opens its output only after its input, once an audio stream is found in it; and it
    // names an input it could not open at the start of its line.
    const inputRefused =
      NO_AUDIO_STREAM.test(run.stderrTail) ||
      run.stderrTail.split('\n').some((line) => line.startsWith(`${ffmpeg.inputUrl(given)}: `));
    throw converterFailure(ctx, inputRefused && !(await exists(wavPath)) ? 'not_audio' : 'conversion_failed', run);
  }
  // ffmpeg exits 0 on a damaged or cut-off input and writes what it could decode: that partial
  // audio must not be stored as the URL's content.
  if (CORRUPT_INPUT.test(run.stderrTail)) throw converterFailure(ctx, 'media_corrupt', run);
  const { header, size, identity } = await readWavHeader(ctx, wavPath);
  const incomplete = incompleteWav(header, size);
  if (incomplete !== null) {
    ctx.log.warn({ reason: incomplete }, 'the converter wrote an incomplete WAV');
    if (await nearlyFull(ctx.workDir)) throw new JobFailure(STORAGE_FULL);
    throw new JobFailure(jobError('conversion_failed', { detail: 'The converter wrote an incomplete WAV file.' }));
  }
  return { wavPath, header, identity, tags: await readTags(tagsPathOf(wavPath)) };
}

/**
 * The tags file's first MAX_TAGS_BYTES, read; null when there is none, or it is not a regular file
 * (opened as ../../tools/regular-file.ts says: a FIFO there never blocks the read).
 */
async function readTags(file: string): Promise<FileTags | null> {
  let handle: FileHandle;
  try {
    handle = await openRegularFile(file);
  } catch {
    return null;
  }
  try {
    const buf = Buffer.alloc(MAX_TAGS_BYTES);
    const { bytesRead } = await handle.read(buf, 0, buf.length, 0);
    return parseFfmetadata(buf.subarray(0, bytesRead).toString('utf8'));
  } finally {
    await handle.close();
  }
}

async function nearlyFull(dir: string): Promise<boolean> {
  const volume = await fs.statfs(dir);
  return volume.bavail * volume.bsize < NEARLY_FULL_BYTES;
}

/**
 * A conversion that failed: `not_audio` (not media at all, media without audio, or media too
 * damaged to open: a truncated MP4 without its index, say), `media_corrupt` or `conversion_failed`,
 * with ffmpeg's words as the detail, and in the job's log.
 */
function converterFailure(
  ctx: FetchContext,
  code: Extract<JobErrorCode, 'not_audio' | 'media_corrupt' | 'conversion_failed'>,
  run: SandboxedResult,
): JobFailure {
  ctx.log.warn(
    { tool: 'ffmpeg', exit_code: run.exitCode, output: toolOutputForLog(run.stderrTail, ctx.hide), code },
    'the converter failed',
  );
  return new JobFailure(jobError(code, { detail: cleanToolMessage(run.stderrTail, ctx.hide) || null }));
}

async function exists(file: string): Promise<boolean> {
  return fs.lstat(file).then(
    () => true,
    () => false,
  );
}

/**
 * The converter's WAV header, its size and which file it is, read once the converter has ended,
 * through one checked descriptor (../../tools/regular-file.ts): what it left at its output path
 * must be a regular file.
 */
async function readWavHeader(
  ctx: FetchContext,
  file: string,
): Promise<{ header: WavHeader; size: number; identity: { dev: number; ino: number } }> {
  let handle;
  try {
    handle = await openRegularFile(file);
  } catch (err) {
    if (!(err instanceof NotRegularFile)) throw err;
    ctx.log.warn({ found: err.found }, 'the converter left something other than a file at its output');
    throw new JobFailure(
      jobError('conversion_failed', { detail: `The converter left ${err.found} instead of a WAV file.` }),
    );
  }
  try {
    const { size, dev, ino } = await handle.stat();
    const buf = Buffer.alloc(64 * 1024);
    const { bytesRead } = await handle.read(buf, 0, buf.length, 0);
    return { header: parseWavHeader(buf.subarray(0, bytesRead)), size, identity: { dev, ino } };
  } catch {
    throw new JobFailure(jobError('conversion_failed', { detail: 'The converter produced no valid WAV file.' }));
  } finally {
    await handle.close();
  }
}
