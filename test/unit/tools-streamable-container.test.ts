import { describe, expect, it } from 'vitest';
import { MAX_SNIFF_BYTES, namesMp4File, streamableContainer } from '../../src/tools/streamable-container.js';

const bytes = (...parts: Array<string | number[] | Buffer>) =>
  Buffer.concat(
    parts.map((part) =>
      typeof part === 'string' ? Buffer.from(part, 'latin1') : Buffer.isBuffer(part) ? part : Buffer.from(part),
    ),
  );
const padded = (head: Buffer) => Buffer.concat([head, Buffer.alloc(16)]);
/** An ID3v2.4 header announcing `size` bytes of tag (syncsafe). */
const id3 = (size: number, flags = 0) =>
  bytes('ID3', [4, 0, flags, (size >> 21) & 0x7f, (size >> 14) & 0x7f, (size >> 7) & 0x7f, size & 0x7f]);

describe('streamableContainer', () => {
  it('streams MPEG audio and ADTS frames, Ogg, FLAC, RIFF WAVE and EBML', () => {
    for (const head of [
      bytes([0xff, 0xfb, 0x90, 0x00]),
      bytes([0xff, 0xf1, 0x50, 0x80]),
      bytes('OggS'),
      bytes('fLaC'),
      bytes('RIFF', [0, 0, 0, 0], 'WAVE'),
      bytes([0x1a, 0x45, 0xdf, 0xa3]),
    ])
      expect(streamableContainer(padded(head)), head.toString('hex')).toBe('stream');
  });

  it('converts MP4 and m4a, other RIFF files, and anything unknown whole', () => {
    for (const head of [
      bytes([0, 0, 0, 0x20], 'ftypM4A '),
      bytes([0, 0, 0, 0x08], 'free'),
      bytes('RIFF', [0, 0, 0, 0], 'AVI '),
      bytes('this is not audio at all'),
      bytes('#EXTM3U\n'),
    ])
      expect(streamableContainer(padded(head)), head.toString('latin1')).toBe('whole');
  });

  it('looks behind ID3v2 tags (and their footer) for frames', () => {
    const frame = bytes([0xff, 0xfb, 0x90, 0x00]);
    expect(streamableContainer(bytes(id3(20), Buffer.alloc(20), frame))).toBe('stream');
    expect(streamableContainer(bytes(id3(20, 0x10), Buffer.alloc(30), frame))).toBe('stream');
    expect(streamableContainer(bytes(id3(4), Buffer.alloc(4), id3(2), Buffer.alloc(2), frame))).toBe('stream');
    // Not frames behind the tag: ffmpeg would probe what follows as a whole file.
    expect(streamableContainer(padded(bytes(id3(4), Buffer.alloc(4), [0, 0, 0, 0x20], 'ftypM4A ')))).toBe('whole');
    expect(streamableContainer(padded(bytes('ID3', [4, 0, 0, 0x80, 0, 0, 0])))).toBe('whole');
  });

  it('asks for more bytes until they decide, never past MAX_SNIFF_BYTES', () => {
    expect(streamableContainer(Buffer.alloc(0))).toBe('more');
    expect(streamableContainer(bytes('Og'))).toBe('more');
    expect(streamableContainer(bytes('ID3', [4, 0]))).toBe('more');
    expect(streamableContainer(bytes(id3(100), Buffer.alloc(50)))).toBe('more');
    // A tag too large to wait for.
    expect(streamableContainer(id3(MAX_SNIFF_BYTES))).toBe('whole');
    expect(streamableContainer(bytes(id3(MAX_SNIFF_BYTES - 20), Buffer.alloc(MAX_SNIFF_BYTES)))).toBe('whole');
  });
});

describe('namesMp4File', () => {
  it("tells an MP4-family name from the URL's path, not from its query or fragment", () => {
    for (const url of [
      'https://media.example/a/song.m4a',
      'https://media.example/clip.MP4?token=x',
      'http://media.example/take.mov#t=3',
      'https://media.example/voice.3gp',
    ])
      expect(namesMp4File(url), url).toBe(true);
    for (const url of [
      'https://media.example/song.mp3',
      'https://media.example/watch?v=abc.m4a',
      'https://media.example/song.m4a/',
      'https://media.example/page#x.mp4',
      'https://media.example/',
      'not a url.m4a',
    ])
      expect(namesMp4File(url), url).toBe(false);
  });
});
