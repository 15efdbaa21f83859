import { describe, expect, it } from 'vitest';
import { incompleteWav, parseWavHeader } from '../../src/tools/wav.js';

function chunk(id: string, body: Buffer): Buffer {
  const head = Buffer.alloc(8);
  head.write(id, 0, 'latin1');
  head.writeUInt32LE(body.length, 4);
  return Buffer.concat([head, body, body.length % 2 ? Buffer.alloc(1) : Buffer.alloc(0)]);
}

function fmtBody(o: { format?: number; channels?: number; rate?: number; bits?: number } = {}): Buffer {
  const { format = 1, channels = 2, rate = 44100, bits = 16 } = o;
  const b = Buffer.alloc(16);
  b.writeUInt16LE(format, 0);
  b.writeUInt16LE(channels, 2);
  b.writeUInt32LE(rate, 4);
  b.writeUInt32LE((rate * channels * bits) / 8, 8);
  b.writeUInt16LE((channels * bits) / 8, 12);
  b.writeUInt16LE(bits, 14);
  return b;
}

function riff(...chunks: Buffer[]): Buffer {
  const body = Buffer.concat([Buffer.from('WAVE', 'latin1'), ...chunks]);
  const head = Buffer.alloc(8);
  head.write('RIFF', 0, 'latin1');
  head.writeUInt32LE(body.length, 4);
  return Buffer.concat([head, body]);
}

describe('parseWavHeader', () => {
  it('reads a plain PCM header', () => {
    const wav = riff(chunk('fmt ', fmtBody()), chunk('data', Buffer.alloc(44100 * 4)));
    expect(parseWavHeader(wav)).toEqual({
      audioFormat: 1,
      channels: 2,
      sampleRate: 44100,
      bitsPerSample: 16,
      dataBytes: 176400,
      durationS: 1,
      riffBytes: wav.length - 8,
      dataOffset: 44,
    });
    expect(incompleteWav(parseWavHeader(wav), wav.length)).toBeNull();
  });

  it('tells a complete file from one cut off, or one whose header claims more than it holds', () => {
    const wav = riff(chunk('fmt ', fmtBody()), chunk('data', Buffer.alloc(4000)));
    expect(incompleteWav(parseWavHeader(wav), wav.length)).toBeNull();
    expect(incompleteWav(parseWavHeader(wav), wav.length - 100)).toMatch(
      /RIFF header declares 4044 bytes, the file has 3944/,
    );
    // A converter cut off before its trailer: the sizes are placeholders (0xFFFFFFFF).
    const unfinished = Buffer.from(wav);
    unfinished.writeUInt32LE(0xffffffff, 4);
    unfinished.writeUInt32LE(0xffffffff, 40);
    expect(incompleteWav(parseWavHeader(unfinished), unfinished.length)).toMatch(/RIFF header declares/);
    // RIFF size right, data size wrong.
    const lying = Buffer.from(wav);
    lying.writeUInt32LE(8000, 40);
    expect(incompleteWav(parseWavHeader(lying), lying.length)).toMatch(
      /data chunk declares 8000 bytes, the file has 4000/,
    );
  });

  it('walks past LIST and odd-sized chunks (with their pad byte)', () => {
    const wav = riff(
      chunk('LIST', Buffer.from('INFOISFT', 'latin1')),
      chunk('fmt ', fmtBody({ channels: 1, rate: 22050 })),
      chunk('junk', Buffer.alloc(3)),
      chunk('data', Buffer.alloc(22050)),
    );
    expect(parseWavHeader(wav)).toMatchObject({ channels: 1, sampleRate: 22050, dataBytes: 22050, durationS: 0.5 });
  });

  it('needs only the start of the file: the declared data size is trusted', () => {
    const wav = riff(chunk('fmt ', fmtBody()), chunk('data', Buffer.alloc(44100 * 4 * 10)));
    expect(parseWavHeader(wav.subarray(0, 64)).durationS).toBe(10);
  });

  it('reads the sub-format of WAVE_FORMAT_EXTENSIBLE', () => {
    const ext = Buffer.alloc(40);
    fmtBody({ format: 0xfffe, channels: 6, rate: 48000, bits: 24 }).copy(ext);
    ext.writeUInt16LE(22, 16); // cbSize
    ext.writeUInt16LE(3, 24); // IEEE float sub-format
    const wav = riff(chunk('fmt ', ext), chunk('data', Buffer.alloc(18)));
    expect(parseWavHeader(wav)).toMatchObject({ audioFormat: 3, channels: 6, sampleRate: 48000, bitsPerSample: 24 });
  });

  it('throws on malformed files', () => {
    expect(() => parseWavHeader(Buffer.from('not a wav file at all'))).toThrow(/RIFF/);
    expect(() => parseWavHeader(riff(chunk('data', Buffer.alloc(4)), chunk('fmt ', fmtBody())))).toThrow(
      /before the fmt/,
    );
    expect(() => parseWavHeader(riff(chunk('fmt ', fmtBody())))).toThrow(/no data chunk/);
    expect(() => parseWavHeader(riff(chunk('LIST', Buffer.alloc(4))))).toThrow(/no fmt chunk/);
    expect(() => parseWavHeader(riff(chunk('fmt ', Buffer.alloc(8))))).toThrow(/truncated/);
    expect(() => parseWavHeader(riff(chunk('fmt ', fmtBody({ channels: 0 })), chunk('data', Buffer.alloc(4))))).toThrow(
      /zero/,
    );
  });
});
