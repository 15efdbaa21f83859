/**
 * Reads a RIFF/WAVE header: walks the chunks (fmt, LIST, fact, data... in any order, each padded
 * to an even size) up to the data chunk. The buffer may hold only the start of the file: the
 * data chunk's declared size is trusted, its bytes need not be present. Throws on anything
 * malformed. RF64 (files over 4 GiB) is not supported; the converter's duration cap keeps
 * outputs far below that.
 */

export interface WavHeader {
  /** 1 = integer PCM, 3 = IEEE float; for WAVE_FORMAT_EXTENSIBLE the sub-format's code. */
  audioFormat: number;
  channels: number;
  sampleRate: number;
  bitsPerSample: number;
  dataBytes: number;
  durationS: number;
  /** The RIFF chunk's declared size: the file's size less 8, in a complete file. */
  riffBytes: number;
  /** Where the data chunk's bytes start. */
  dataOffset: number;
}

const WAVE_FORMAT_EXTENSIBLE = 0xfffe;

export function parseWavHeader(buf: Buffer): WavHeader {
  if (buf.length < 12 || buf.toString('latin1', 0, 4) !== 'RIFF' || buf.toString('latin1', 8, 12) !== 'WAVE') {
    throw new Error('not a RIFF/WAVE file');
  }
  let fmt: (Omit<WavHeader, 'dataBytes' | 'durationS' | 'riffBytes' | 'dataOffset'> & { blockAlign: number }) | null =
    null;
  const riffBytes = buf.readUInt32LE(4);
  let offset = 12;
  while (offset + 8 <= buf.length) {
    const id = buf.toString('latin1', offset, offset + 4);
    const size = buf.readUInt32LE(offset + 4);
    const body = offset + 8;
    if (id === 'fmt ') {
      if (size < 16 || body + size > buf.length) throw new Error('WAV fmt chunk is truncated');
      fmt = {
        audioFormat: buf.readUInt16LE(body),
        channels: buf.readUInt16LE(body + 2),
        sampleRate: buf.readUInt32LE(body + 4),
        blockAlign: buf.readUInt16LE(body + 12),
        bitsPerSample: buf.readUInt16LE(body + 14),
      };
      if (fmt.audioFormat === WAVE_FORMAT_EXTENSIBLE) {
        // cbSize(2) validBits(2) channelMask(4), then the sub-format GUID whose first two bytes are the code.
        if (size < 40) throw new Error('WAV extensible fmt chunk is truncated');
        fmt.audioFormat = buf.readUInt16LE(body + 24);
      }
      if (fmt.channels === 0 || fmt.sampleRate === 0 || fmt.blockAlign === 0 || fmt.bitsPerSample === 0) {
        throw new Error('WAV fmt chunk has a zero field');
      }
    } else if (id === 'data') {
      if (!fmt) throw new Error('WAV data chunk comes before the fmt chunk');
      const { blockAlign, ...rest } = fmt;
      return { ...rest, dataBytes: size, durationS: size / (fmt.sampleRate * blockAlign), riffBytes, dataOffset: body };
    }
    offset = body + size + (size % 2);
  }
  throw new Error(fmt ? 'WAV has no data chunk' : 'WAV has no fmt chunk');
}

/**
 * Why a WAV file of `fileBytes` is not whole, or null: a complete file is exactly as long as its
 * RIFF header says, and its data chunk (with its pad byte), the last chunk a converter writes, ends
 * the file. A writer cut off (no space left, a killed converter) leaves sizes that disagree.
 */
export function incompleteWav(header: WavHeader, fileBytes: number): string | null {
  if (header.riffBytes + 8 !== fileBytes)
    return `the RIFF header declares ${header.riffBytes + 8} bytes, the file has ${fileBytes}`;
  const dataEnd = header.dataOffset + header.dataBytes + (header.dataBytes % 2);
  if (dataEnd !== fileBytes)
    return `the data chunk declares ${header.dataBytes} bytes, the file has ${fileBytes - header.dataOffset} after its header`;
  return null;
}
