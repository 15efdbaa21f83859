import { describe, expect, it } from 'vitest';
import { buildListingArgs, LISTING_PREFIX } from '../../src/tools/ytdlp-args.js';
import { parseListingLine, stripSmuggledData } from '../../src/tools/ytdlp-listing.js';

/**
 * A collection's listing run: its command line, and its lines read (src/tools/ytdlp-listing.ts).
 * The lines below are as Debian's yt-dlp 2023.03.04 and 2026.10.26 print them for a feed, an
 * XSPF playlist, a page of <audio> elements and a single file (test/e2e/collection-listing.test.ts
 * runs both against them).
 */
const line = (fields: Record<string, unknown>) => `${LISTING_PREFIX}${JSON.stringify(fields)}`;

describe('buildListingArgs', () => {
  it('lists lazily, flat, entries 1 to items, one line each; the guard by its config file; the URL last after --', () => {
    const args = buildListingArgs({
      url: '-https://example.com/feed.xml',
      items: 51,
      configFile: '/w/job.listing/yt-dlp.conf',
      noFfmpegDir: '/w/job.listing/no-ffmpeg',
    });
    expect(args.slice(0, 9)).toEqual([
      '--ignore-config',
      '--no-cache-dir',
      '--no-colors',
      '--yes-playlist',
      '--flat-playlist',
      '--lazy-playlist',
      '--playlist-items',
      '1:51',
      '--abort-on-error',
    ]);
    expect(args[args.indexOf('--print') + 1]).toMatch(/^ENTRY %\(\.\{_type,url,title,playlist_index,[a-z_,]+\}\)j$/);
    expect(args[args.indexOf('--config-locations') + 1]).toBe('/w/job.listing/yt-dlp.conf');
    expect(args[args.indexOf('--ffmpeg-location') + 1]).toBe('/w/job.listing/no-ffmpeg');
    expect(args.slice(-2)).toEqual(['--', '-https://example.com/feed.xml']);
    expect(args).not.toContain('--no-playlist');
  });
});

describe('stripSmuggledData', () => {
  it("drops yt-dlp's smuggled-data fragment and everything after it", () => {
    expect(stripSmuggledData('http://h/a.mp3#__youtubedl_smuggle=%7B%22force_videoid%22%3A+%221%22%7D')).toBe(
      'http://h/a.mp3',
    );
    // A feed's own smuggled data, which yt-dlp merges into its own: gone with it.
    expect(stripSmuggledData('http://h/a.mp3#__youtubedl_smuggle=%7B%7D#__youtubedl_smuggle=%7B%22x%22%7D')).toBe(
      'http://h/a.mp3',
    );
  });

  it('the controls: a URL without it, or with another fragment, stays as it is', () => {
    expect(stripSmuggledData('http://h/a.mp3')).toBe('http://h/a.mp3');
    expect(stripSmuggledData('http://h/a.mp3?x=1#t=10')).toBe('http://h/a.mp3?x=1#t=10');
  });
});

describe('parseListingLine', () => {
  it("a feed's item: its URL without smuggled data, its title, the feed's title and id", () => {
    expect(
      parseListingLine(
        line({
          _type: 'url_transparent',
          url: 'http://169.254.169.254/x#__youtubedl_smuggle=%7B%22force_videoid%22%3A+%222%22%7D',
          title: 'Meta',
          playlist_index: 2,
          playlist_id: 'http://127.0.0.1:1/feed.xml',
          playlist_title: 'My <b>Feed</b>',
        }),
      ),
    ).toEqual({
      url: 'http://169.254.169.254/x',
      title: 'Meta',
      playlistIndex: 2,
      playlistId: 'http://127.0.0.1:1/feed.xml',
      playlistTitle: 'My Feed',
      playlistUrl: null,
      collection: false,
    });
  });

  it('titles made display-safe: markup, controls and bidi overrides gone, cut at 300 characters', () => {
    const listed = parseListingLine(
      line({ url: 'http://h/a', title: 'A\n<script>x</script>\u202egnp.exe', playlist_index: 1 }),
    );
    expect(listed!.title).toBe('A xgnp.exe');
    const long = parseListingLine(line({ url: 'http://h/a', title: 'é'.repeat(1000), playlist_index: 1 }));
    expect([...long!.title!]).toHaveLength(300);
    expect(parseListingLine(line({ url: 'http://h/a', title: ' <b></b> ', playlist_index: 1 }))!.title).toBeNull();
  });

  it('a collection inside the collection is one: _type playlist or multi_video', () => {
    expect(parseListingLine(line({ _type: 'playlist', url: 'http://h/p', playlist_index: 1 }))!.collection).toBe(true);
    expect(parseListingLine(line({ _type: 'multi_video', url: 'http://h/p', playlist_index: 1 }))!.collection).toBe(
      true,
    );
    expect(parseListingLine(line({ _type: 'url', url: 'http://h/p', playlist_index: 1 }))!.collection).toBe(false);
  });

  it('a URL that is one item: no playlist index; nor one that is not a positive integer', () => {
    expect(parseListingLine(line({ url: 'http://h/a.mp3', title: 'a' }))!.playlistIndex).toBeNull();
    expect(parseListingLine(line({ url: 'http://h/a.mp3', playlist_index: 0 }))!.playlistIndex).toBeNull();
    expect(parseListingLine(line({ url: 'http://h/a.mp3', playlist_index: '1' }))!.playlistIndex).toBeNull();
  });

  it('an entry without a URL has none; numbers become text', () => {
    expect(parseListingLine(line({ title: 'x', playlist_index: 1, playlist_id: 42 }))).toMatchObject({
      url: null,
      playlistId: '42',
    });
  });

  it('other lines are none of its business; a malformed entry line throws', () => {
    expect(parseListingLine('WARNING: [generic] Falling back on generic information extractor')).toBeNull();
    expect(parseListingLine('{"url": "http://h/a"}')).toBeNull();
    expect(() => parseListingLine(`${LISTING_PREFIX}{"url": `)).toThrow(/not valid JSON/);
    expect(() => parseListingLine(`${LISTING_PREFIX}["http://h/a"]`)).toThrow(/not a JSON object/);
    expect(() => parseListingLine(`${LISTING_PREFIX}null`)).toThrow(/not a JSON object/);
  });
});
