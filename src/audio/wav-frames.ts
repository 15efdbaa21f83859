import { parseWavHeader, type WavHeader } from '../tools/wav.js';

/**
 * A 16-bit PCM WAV's bytes as they stream past (the store's hash loop), handed on as whole frames:
 * the header is gathered and parsed, the data chunk's bytes are cut into interleaved Int16Array
 * views of whole frames, a frame split between two chunks is carried over, and a view that would
 * not start on an even address is copied first. What the sink sees needs no bookkeeping of its own:
 * every array starts on a frame and holds whole frames, so a per-frame loop has no edge cases.
 *
 * Only what the converter writes is read: integer PCM, 16 bits, little-endian hosts. Anything else
 * (another format, bytes that are not a WAV, a header longer than MAX_HEADER_BYTES) is refused
 * once and nothing more is handed on; a file shorter than its header says gives what it holds.
 */
export interface FrameSink {
  /** The header, once parsed; false refuses the file (nothing more is handed on). */
  begin(header: WavHeader): boolean;
  /** Whole interleaved frames, in order; the array is reused after the call returns. */
  frames(samples: Int16Array): void;
}

export interface FrameReader {
  /** The next bytes; the caller may reuse `chunk` once this returns (what is kept is copied). */
  update(chunk: Buffer): void;
  /** Whether the bytes so far were a 16-bit PCM WAV whose header the sink accepted. */
  readonly accepted: boolean;
}

/** A header that has not reached its data chunk within this many bytes is not the converter's. */
const MAX_HEADER_BYTES = 64 * 1024;
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

export function createFrameReader(sink: FrameSink): FrameReader {
  /** The bytes before the header was whole: a copy, since the caller may reuse its chunks. */
  let headerSoFar: Buffer = Buffer.alloc(0);
  let failed = false;
  let accepted = false;
  /** Bytes of the data chunk still to come. */
  let dataLeft = 0;
  let frameBytes = 0;
  /** The start of a frame a chunk ended inside, and how many of its bytes are there. */
  let partial = Buffer.alloc(0);
  let partialLength = 0;
  /** Where a chunk's frames are copied when they do not start on an even address. */
  let aligned = Buffer.alloc(0);

  function emit(bytes: Buffer): void {
    let view = bytes;
    if (view.byteOffset % 2 !== 0) {
      if (aligned.length < view.length) aligned = Buffer.alloc(view.length);
      view.copy(aligned, 0, 0, view.length);
      view = aligned.subarray(0, view.length);
    }
    sink.frames(new Int16Array(view.buffer, view.byteOffset, view.length / 2));
  }

  function takeData(chunk: Buffer): void {
    if (dataLeft <= 0) return;
    let bytes = chunk.length > dataLeft ? chunk.subarray(0, dataLeft) : chunk;
    dataLeft -= bytes.length;
    if (partialLength > 0) {
      const take = Math.min(frameBytes - partialLength, bytes.length);
      bytes.copy(partial, partialLength, 0, take);
      partialLength += take;
      bytes = bytes.subarray(take);
      if (partialLength < frameBytes) return;
      emit(partial);
      partialLength = 0;
    }
    const whole = bytes.length - (bytes.length % frameBytes);
    if (whole > 0) emit(bytes.subarray(0, whole));
    if (whole < bytes.length) {
      bytes.copy(partial, 0, whole);
      partialLength = bytes.length - whole;
    }
  }

  function begin(header: WavHeader): boolean {
    if (!LITTLE_ENDIAN || header.audioFormat !== 1 || header.bitsPerSample !== 16) return false;
    if (!sink.begin(header)) return false;
    frameBytes = 2 * header.channels;
    partial = Buffer.alloc(frameBytes);
    dataLeft = header.dataBytes;
    return true;
  }

  return {
    get accepted() {
      return accepted;
    },
    update(chunk) {
      if (failed || chunk.length === 0) return;
      if (accepted) return takeData(chunk);
      // A header whole in its first chunk (the usual case) is parsed where it is, never copied.
      const start = headerSoFar.length === 0 ? chunk : Buffer.concat([headerSoFar, chunk]);
      let parsed: WavHeader;
      try {
        parsed = parseWavHeader(start);
      } catch {
        // Not yet the whole header, or not a WAV: wait for more, up to a bound.
        if (start.length >= MAX_HEADER_BYTES || (start.length >= 12 && !looksLikeWav(start))) failed = true;
        else headerSoFar = start === chunk ? Buffer.from(chunk) : start;
        return;
      }
      headerSoFar = Buffer.alloc(0);
      if (!begin(parsed)) {
        failed = true;
        return;
      }
      accepted = true;
      takeData(start.subarray(parsed.dataOffset));
    },
  };
}

function looksLikeWav(start: Buffer): boolean {
  return start.toString('latin1', 0, 4) === 'RIFF' && start.toString('latin1', 8, 12) === 'WAVE';
}
