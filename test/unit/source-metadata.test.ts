import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { cleanDisplayText, codePoints } from '../../src/tools/display-text.js';
import { MAX_TAGS_BYTES, parseFfmetadata } from '../../src/tools/ffmpeg-tags.js';
import {
  MEDIA_TEXT_BOUNDS,
  readStoredMedia,
  sourceMediaOf,
  storedMedia,
  type SourceMedia,
} from '../../src/tools/media-metadata.js';
import type { MediaInfo } from '../../src/tools/ytdlp-output.js';

/** What a source's metadata becomes before it reaches a job record: src/tools/display-text.ts, media-metadata.ts, ffmpeg-tags.ts. */

const RTL = 'שיר ערש'; // Hebrew: "lullaby"
const EMOJI = '👩‍👩‍👧 🎵';

describe('cleanDisplayText', () => {
  it('keeps ordinary text of any script as it is, with its quotes, slashes and emoji', () => {
    for (const text of [`Ein "Lied" / Teil 2`, `${RTL} — ${EMOJI}`, "l'été à Paris", 'I <3 you', 'AC/DC & Co. 100%'])
      expect(cleanDisplayText(text, 300)).toBe(text);
  });

  it('removes control characters, turns line breaks and tabs into spaces, and trims', () => {
    expect(cleanDisplayText('  A\u0000B\u001b[31mC\u007f\u0085D\tE\r\nF\u2028G  ', 300)).toBe('AB[31mC D E F G');
  });

  it('removes bidirectional embeddings, overrides and isolates, and keeps the marks and right-to-left letters', () => {
    // "song<RLO>vaw.exe" shows as "songexe.wav": the override goes, the text reads as it is.
    expect(cleanDisplayText('song\u202evaw.exe', 300)).toBe('songvaw.exe');
    expect(cleanDisplayText('\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069x', 300)).toBe('x');
    expect(cleanDisplayText(`${RTL}\u200f (live)`, 300)).toBe(`${RTL}\u200f (live)`);
  });

  it('removes lone surrogates, byte-order marks and noncharacters', () => {
    expect(cleanDisplayText('a\ud800b\udc00c\ufeffd\uffffe', 300)).toBe('abcde');
  });

  it('never leaves markup: tags go, nested ones too, and a < that could open one becomes ＜', () => {
    expect(cleanDisplayText('<b>Bold</b> <i>move</i>', 300)).toBe('Bold move');
    expect(cleanDisplayText('<script>alert(1)</script>Song', 300)).toBe('alert(1)Song');
    expect(cleanDisplayText('<<b>script>alert(1)<</b>/script>', 300)).toBe('alert(1)');
    expect(cleanDisplayText('<img src=x onerror=alert(1)', 300)).toBe('＜img src=x onerror=alert(1)');
    expect(cleanDisplayText('<!-- c --><?php ?>x</', 300)).toBe('x＜/');
    // A tag cut by a character that is removed is still a tag.
    expect(cleanDisplayText('<\u202eb>x</b\u0000>', 300)).toBe('x');
    // Entities stay text: decoding them would make tags.
    expect(cleanDisplayText('&lt;b&gt; &amp;', 300)).toBe('&lt;b&gt; &amp;');
  });

  it('cuts at its bound in code points, between graphemes, ending in …', () => {
    const long = 'x'.repeat(2000);
    expect(cleanDisplayText(long, 300)).toBe(`${'x'.repeat(299)}…`);
    // A family emoji is one grapheme of 5 code points: never split.
    const families = '👩‍👩‍👧'.repeat(100);
    const cut = cleanDisplayText(families, 12)!;
    expect(cut).toBe('👩‍👩‍👧👩‍👩‍👧…');
    expect(codePoints(cut)).toBeLessThanOrEqual(12);
  });

  it('is null for what is not a string or leaves nothing', () => {
    for (const value of [undefined, null, 42, ['x'], { a: 1 }, '', '  \u0000 ', '<b></b>']) {
      expect(cleanDisplayText(value, 300)).toBeNull();
    }
  });

  it('property: whatever the input, the result is within its bound, has no control, override or tag, and is stable', () => {
    const unsafe = /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]|<[A-Za-z/!?]/;
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 400 }), fc.integer({ min: 1, max: 300 }), (text, max) => {
        const cleaned = cleanDisplayText(text, max);
        if (cleaned === null) return;
        expect(codePoints(cleaned)).toBeLessThanOrEqual(max);
        expect(unsafe.test(cleaned)).toBe(false);
        // Well-formed: no lone surrogate.
        expect(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(cleaned)).toBe(false);
        // Cleaning twice changes nothing (the cut's … is text like any other).
        expect(cleanDisplayText(cleaned, max)).toBe(cleaned);
      }),
      { numRuns: 500 },
    );
  });
});

describe('parseFfmetadata', () => {
  it('reads the global title, artist and album, whatever the case of their keys, unescaping values', () => {
    // As ffmpeg 5.1 writes them: `=`, `;`, `#`, `\` and line breaks escaped with a backslash.
    const text = String.raw`;FFMETADATA1
TITLE=Tëst "q" / שלום 🎵 a\=b\;c\#d\\e
ARTIST=Line one\
line two
album=Alb
encoder=Lavf59.27.100
`;
    expect(parseFfmetadata(text)).toEqual({
      title: String.raw`Tëst "q" / שלום 🎵 a=b;c#d\e`,
      artist: 'Line one\nline two',
      album: 'Alb',
    });
  });

  it("takes the album's artist only when there is no artist, the first of each, and skips comments and empty values", () => {
    const text = ';FFMETADATA1\n; a comment\n#another\ntitle=\nalbum_artist=AA\nartist=A\ntitle=Second\ntitle=Third\n';
    expect(parseFfmetadata(text)).toEqual({ artist: 'A', title: 'Second' });
    expect(parseFfmetadata(';FFMETADATA1\nalbum_artist=AA\nartist= \n')).toEqual({ artist: 'AA' });
  });

  it('reads the global section only, and not a last line cut short', () => {
    expect(parseFfmetadata(';FFMETADATA1\nalbum=A\n[STREAM]\ntitle=Stream\n')).toEqual({ album: 'A' });
    expect(parseFfmetadata(';FFMETADATA1\nalbum=A\ntitle=Cut sho')).toEqual({ album: 'A' });
  });

  it('is empty for anything else', () => {
    expect(parseFfmetadata('')).toEqual({});
    expect(parseFfmetadata('title=x\n')).toEqual({});
    expect(MAX_TAGS_BYTES).toBeGreaterThan(1024);
  });
});

describe('sourceMediaOf', () => {
  const direct: MediaInfo = {
    extractor: 'generic',
    extractorKey: 'Generic',
    mediaId: 'tone',
    title: 'tone',
    direct: true,
    uploadDate: '20261130',
    webpageUrl: 'http://127.0.0.1:8000/tone.mp3',
    isPlaylist: false,
    overridesProxy: false,
    protocols: ['http'],
  };

  it('for a direct link, takes the title, artist and album from the file over its name', () => {
    expect(sourceMediaOf(direct, { title: 'Real <b>Title</b>', artist: 'Art', album: 'Alb' })).toEqual<SourceMedia>({
      extractor: 'Generic',
      id: 'tone',
      title: 'Real Title',
      artist: 'Art',
      album: 'Alb',
      track: null,
      duration: null,
      upload_date: '2026-11-30',
      webpage_url: 'http://127.0.0.1:8000/tone.mp3',
    });
    // Without tags (or before the conversion), the file's name.
    expect(sourceMediaOf(direct).title).toBe('tone');
    expect(sourceMediaOf(direct, {}).title).toBe('tone');
  });

  it("for a page's embedded media, keeps the page's title without yt-dlp's embed number, the tags filling in the rest", () => {
    const page: MediaInfo = {
      ...direct,
      extractor: 'html5',
      extractorKey: 'HTML5MediaEmbed',
      mediaId: 'page-1',
      title: `OG "Title" / ${RTL} (1)`,
      direct: undefined,
    };
    expect(sourceMediaOf(page, { title: 'Tag title', artist: 'Tag artist' })).toMatchObject({
      title: `OG "Title" / ${RTL}`,
      artist: 'Tag artist',
    });
    // Only its own number goes.
    expect(sourceMediaOf({ ...page, title: 'Song (1)', mediaId: 'page-2' }).title).toBe('Song (1)');
  });

  it("for a site's extractor, keeps what the site says and ignores the file's tags", () => {
    const site: MediaInfo = {
      ...direct,
      extractor: 'youtube',
      extractorKey: 'Youtube',
      mediaId: 'abc',
      title: 'Site title',
      direct: undefined,
      artist: 'Site artist',
      track: 'Track',
      durationS: 212.5,
    };
    expect(sourceMediaOf(site, { title: 'Tag', artist: 'Tag', album: 'Tag album' })).toMatchObject({
      title: 'Site title',
      artist: 'Site artist',
      album: null,
      track: 'Track',
      duration: 212.5,
    });
  });

  it('bounds every text, and keeps only real days, believable durations and http(s) pages without credentials', () => {
    const media = sourceMediaOf({
      ...direct,
      direct: undefined,
      title: 't'.repeat(2000),
      artist: 'a'.repeat(2000),
      album: 'b'.repeat(2000),
      track: 'c'.repeat(2000),
      mediaId: 'i'.repeat(2000),
      extractorKey: 'E'.repeat(2000),
    });
    for (const key of ['title', 'artist', 'album', 'track', 'id', 'extractor'] as const)
      expect(codePoints(media[key]!)).toBe(MEDIA_TEXT_BOUNDS[key]);
    const of = (fields: Partial<MediaInfo>) => sourceMediaOf({ ...direct, ...fields });
    expect(of({ uploadDate: '20260231' }).upload_date).toBeNull();
    expect(of({ uploadDate: '2026-11-30' }).upload_date).toBeNull();
    expect(of({ durationS: -1 }).duration).toBeNull();
    expect(of({ durationS: 1e12 }).duration).toBeNull();
    expect(of({ webpageUrl: 'javascript:alert(1)' }).webpage_url).toBeNull();
    expect(of({ webpageUrl: 'file:///etc/passwd' }).webpage_url).toBeNull();
    expect(of({ webpageUrl: 'not a url' }).webpage_url).toBeNull();
    expect(of({ webpageUrl: `https://x.example/${'p'.repeat(3000)}` }).webpage_url).toBeNull();
    expect(of({ webpageUrl: 'https://user:pw@x.example/a b?q=<1>' }).webpage_url).toBe(
      'https://x.example/a%20b?q=%3C1%3E',
    );
  });

  it('is kept as JSON and read back the same; anything else reads as none', () => {
    const media = sourceMediaOf(direct, { title: `${RTL} ${EMOJI}` });
    expect(readStoredMedia(storedMedia(media))).toEqual(media);
    for (const stored of [null, '', 'not json', '42', '{"extractor":"x"}', '{"id":"x"}'])
      expect(readStoredMedia(stored)).toBeNull();
    expect(readStoredMedia('{"extractor":"x","id":"y","title":7,"duration":"3"}')).toMatchObject({
      title: null,
      duration: null,
    });
  });
});
