import { describe, expect, it } from 'vitest';
import { cleanToolMessage } from '../../src/tools/tool-message.js';
import {
  buildDownloadArgs,
  buildWarmUpRun,
  configFileText,
  GUARDED_FORMAT,
  isGuardedProtocol,
  netscapeCookiesProblem,
} from '../../src/tools/ytdlp-args.js';
import { classifyYtDlpFailure, describeYtDlpFailure } from '../../src/tools/ytdlp-failure.js';
import { parseInfoJson, parseProgressLine } from '../../src/tools/ytdlp-output.js';

describe('configFileText', () => {
  it('sets the proxy in a line yt-dlp splits like a shell', () => {
    expect(configFileText({ proxyUrl: 'http://3f0c-1:tok_en-9@127.0.0.1:8899' })).toBe(
      '--proxy "http://3f0c-1:tok_en-9@127.0.0.1:8899"\n',
    );
    expect(configFileText({ proxyUrl: 'http://job:t@[::1]:8899' })).toBe('--proxy "http://job:t@[::1]:8899"\n');
  });

  it("names the job's copy of the cookies by a path relative to the job's folder", () => {
    expect(configFileText({ proxyUrl: 'http://j:t@127.0.0.1:1', cookies: true })).toBe(
      '--proxy "http://j:t@127.0.0.1:1"\n--cookies cookies.txt\n',
    );
    expect(configFileText({ cookies: true })).toBe('--cookies cookies.txt\n');
  });

  it.each([
    'http://a:b c@127.0.0.1:1',
    'http://a:b"c@127.0.0.1:1',
    "http://a:b'c@127.0.0.1:1",
    'http://a:b#c@127.0.0.1:1',
    'http://a:b\\c@127.0.0.1:1',
    'http://a:b\nc@127.0.0.1:1',
  ])('refuses %j rather than write a line that splits differently', (url) => {
    expect(() => configFileText({ proxyUrl: url })).toThrow(/config file/);
  });
});

describe('netscapeCookiesProblem', () => {
  const header = '# Netscape HTTP Cookie File\n';
  it('takes the format yt-dlp reads: header, comments, blank lines, #HttpOnly_ lines, 7 tab-separated fields', () => {
    expect(
      netscapeCookiesProblem(
        `${header}# a comment\n\n.example.com\tTRUE\t/\tTRUE\t1999999999\tsid\tabc\n#HttpOnly_example.com\tFALSE\t/\tFALSE\t0\tx\ty\n`,
      ),
    ).toBeNull();
    expect(netscapeCookiesProblem('# HTTP Cookie File\r\n127.0.0.1\tFALSE\t/\tFALSE\t\tsession\tv\r\n')).toBeNull();
  });

  it('names what is wrong by line number, never by content', () => {
    expect(netscapeCookiesProblem('.example.com\tTRUE\t/\tTRUE\t0\tsid\tsecret-value\n')).toBe(
      'its first line is not "# Netscape HTTP Cookie File"',
    );
    expect(netscapeCookiesProblem(`${header}.example.com TRUE / TRUE 0 sid secret-value\n`)).toBe(
      'line 2 does not have 7 tab-separated fields',
    );
    expect(netscapeCookiesProblem(`${header}\n.example.com\tTRUE\t/\tTRUE\tsoon\tsid\tsecret-value\n`)).toBe(
      'line 3 has an expiry that is not a number',
    );
    expect(netscapeCookiesProblem('[{"name": "sid", "value": "secret-value"}]')).not.toContain('secret');
  });
});

describe('buildDownloadArgs', () => {
  it('extracts, prints the info JSON, waits at the gate, then downloads; the URL last after --', () => {
    const args = buildDownloadArgs({
      url: 'https://example.com/a.mp3',
      outputDir: '/w/job/download',
      configFile: '/w/job/yt-dlp.conf',
      maxBytes: 1000,
      socketTimeoutS: 20,
    });
    expect(args).toEqual([
      '--ignore-config',
      '--no-cache-dir',
      '--no-colors',
      '--no-playlist',
      '-f',
      'bestaudio/best',
      '--newline',
      '--progress',
      '--progress-template',
      'download:PROGRESS %(progress.downloaded_bytes)d %(progress.total_bytes)d %(progress.total_bytes_estimate)d',
      '--print',
      'pre_process:INFO %()j',
      '--print',
      'after_move:filepath',
      '-o',
      '/w/job/download/source.%(ext)s',
      '--no-part',
      '--no-mtime',
      '--restrict-filenames',
      '--hls-prefer-native',
      '--fixup',
      'never',
      '--abort-on-unavailable-fragment',
      '--config-locations',
      '/w/job/yt-dlp.conf',
      '--socket-timeout',
      '20',
      '--max-filesize',
      '1000',
      '--exec',
      'before_dl:: %(source_fetch_no_field|)q; mkfifo gate && echo GATE && read -r go < gate',
      '--no-simulate',
      '--',
      'https://example.com/a.mp3',
    ]);
  });

  it('passes a URL starting with "-" after --, and no byte limit or configuration unless given', () => {
    const args = buildDownloadArgs({ url: '-x', outputDir: '/w/d' });
    expect(args.slice(-2)).toEqual(['--', '-x']);
    expect(args).not.toContain('--max-filesize');
    expect(args).not.toContain('--config-locations');
  });

  it('escapes % in the output folder, which is a template', () => {
    const args = buildDownloadArgs({ url: 'u', outputDir: '/w/100%(id)s' });
    expect(args[args.indexOf('-o') + 1]).toBe('/w/100%%(id)s/source.%(ext)s');
  });
});

describe('buildWarmUpRun', () => {
  it("is a job's run with the job's format, simulated on its info file: no gate, no URL", () => {
    const { argv, info, info_file } = buildWarmUpRun();
    const job = buildDownloadArgs({ url: 'u', outputDir: '.', format: GUARDED_FORMAT });
    expect(argv[argv.indexOf('-f') + 1]).toBe(GUARDED_FORMAT);
    expect(argv.slice(-3)).toEqual(['--simulate', '--load-info-json', info_file]);
    expect(argv).not.toContain('--exec');
    expect(argv).not.toContain('--no-simulate');
    expect(argv).not.toContain('--');
    // Every print a job's run makes, the warm-up makes too.
    const prints = (args: string[]) => args.filter((_, i) => args[i - 1] === '--print');
    expect(prints(argv)).toEqual(prints(job));
    expect(info).toMatchObject({ extractor_key: 'Generic', formats: [{ protocol: 'http' }] });
  });
});

describe('parseProgressLine', () => {
  it('reads downloaded and total bytes', () => {
    expect(parseProgressLine('PROGRESS 1024 37764 NA')).toEqual({ downloadedBytes: 1024, totalBytes: 37764 });
  });

  it('falls back to the estimate, then to null', () => {
    expect(parseProgressLine('PROGRESS 500 NA 9000')).toEqual({ downloadedBytes: 500, totalBytes: 9000 });
    expect(parseProgressLine('PROGRESS 500 NA NA')).toEqual({ downloadedBytes: 500, totalBytes: null });
  });

  it('ignores other lines', () => {
    expect(parseProgressLine('/w/job/download/source.m4a')).toBeNull();
    expect(parseProgressLine('PROGRESS NA NA NA')).toBeNull();
    expect(parseProgressLine('[download]  12.0% of 3.00MiB')).toBeNull();
    expect(parseProgressLine('PROGRESS 1 2')).toBeNull();
  });
});

describe('parseInfoJson', () => {
  // As yt-dlp 2023.03.04 prints it for a direct link (trimmed).
  const generic = JSON.stringify({
    id: 'a',
    title: 'a',
    direct: true,
    extractor: 'generic',
    extractor_key: 'Generic',
    webpage_url: 'http://127.0.0.1:8000/a.m4a',
    _type: 'video',
  });

  it('reads a generic direct link', () => {
    expect(parseInfoJson(generic)).toEqual({
      extractor: 'generic',
      extractorKey: 'Generic',
      mediaId: 'a',
      title: 'a',
      direct: true,
      webpageUrl: 'http://127.0.0.1:8000/a.m4a',
      isPlaylist: false,
      overridesProxy: false,
      protocols: [],
    });
  });

  it('reads the source metadata: artist, else creator, else uploader; lists joined; blanks and non-strings left out', () => {
    const base = { id: 'v', extractor: 'x', extractor_key: 'X' };
    const read = (fields: Record<string, unknown>) => parseInfoJson(JSON.stringify({ ...base, ...fields }));
    expect(
      read({ title: 'T', artist: 'A', creator: 'C', uploader: 'U', album: 'Al', track: 'Tr', upload_date: '20261130' }),
    ).toMatchObject({ title: 'T', artist: 'A', album: 'Al', track: 'Tr', uploadDate: '20261130' });
    expect(read({ creator: 'C', uploader: 'U' }).artist).toBe('C');
    expect(read({ artist: ' ', uploader: 'U' }).artist).toBe('U');
    expect(read({ artists: ['A', 'B', 3], creator: 'C' }).artist).toBe('A, B');
    expect(read({ creators: ['C1'], uploader: 'U' }).artist).toBe('C1');
    const none = read({ title: 42, artist: null, album: ['x', 'y'], upload_date: 20261130, direct: 'yes' });
    // A list where text is expected is joined too (yt-dlp's newer list fields); numbers and the rest are not text.
    expect(none).toMatchObject({ album: 'x, y' });
    for (const key of ['title', 'artist', 'track', 'uploadDate', 'direct'] as const) expect(none[key]).toBeUndefined();
  });

  it('lists the protocol of every format, or of the item itself', () => {
    const formats = [{ protocol: 'https' }, { protocol: 'm3u8_native' }, { protocol: 'rtmp' }, { url: 'x' }];
    expect(parseInfoJson(JSON.stringify({ id: 'v', extractor: 'x', extractor_key: 'X', formats })).protocols).toEqual([
      'https',
      'm3u8_native',
      'rtmp',
    ]);
    expect(
      parseInfoJson(JSON.stringify({ id: 'v', extractor: 'x', extractor_key: 'X', protocol: 'rtsp' })).protocols,
    ).toEqual(['rtsp']);
  });

  it('reads duration and live state', () => {
    const info = parseInfoJson(
      JSON.stringify({
        id: 123,
        extractor: 'youtube',
        extractor_key: 'Youtube',
        duration: 212.5,
        is_live: false,
        live_status: 'is_live',
      }),
    );
    expect(info).toMatchObject({ mediaId: '123', durationS: 212.5, isLive: true });
  });

  it('flags playlists, and the items of one', () => {
    const base = { id: 'p', extractor: 'x', extractor_key: 'X' };
    expect(parseInfoJson(JSON.stringify({ ...base, _type: 'playlist' })).isPlaylist).toBe(true);
    expect(parseInfoJson(JSON.stringify({ ...base, playlist_autonumber: 1, playlist: 'p' })).isPlaylist).toBe(true);
    expect(parseInfoJson(JSON.stringify({ ...base, playlist_index: 2 })).isPlaylist).toBe(true);
    // A single video names no playlist.
    expect(parseInfoJson(JSON.stringify({ ...base, playlist: null, playlist_index: null })).isPlaylist).toBe(false);
  });

  it('flags a Ytdl-request-proxy header, in any case and at any depth, and nothing else', () => {
    const base = { id: 'x', extractor: 'x', extractor_key: 'X' };
    const flagged = (extra: object) => parseInfoJson(JSON.stringify({ ...base, ...extra })).overridesProxy;
    expect(flagged({ http_headers: { 'Ytdl-request-proxy': '__noproxy__' } })).toBe(true);
    expect(flagged({ formats: [{ url: 'http://h/a', http_headers: { 'ytdl-REQUEST-proxy': 'http://e:1' } }] })).toBe(
      true,
    );
    expect(
      flagged({
        formats: [{ url: 'http://h/b', fragments: [{ path: 'x', http_headers: { 'Ytdl-Request-Proxy': 'a' } }] }],
      }),
    ).toBe(true);
    expect(flagged({ http_headers: { 'User-Agent': 'a', Cookie: 'sid=1' }, formats: [{ http_headers: {} }] })).toBe(
      false,
    );
    // Only a header counts: the name elsewhere is data.
    expect(flagged({ title: 'Ytdl-request-proxy', tags: { 'Ytdl-request-proxy': 'x' } })).toBe(false);
  });

  it('throws on malformed input', () => {
    expect(() => parseInfoJson('not json')).toThrow(/not valid JSON/);
    expect(() => parseInfoJson('[1]')).toThrow(/not an object/);
    expect(() => parseInfoJson('null')).toThrow(/not an object/);
    expect(() => parseInfoJson(JSON.stringify({ extractor: 'generic', extractor_key: 'Generic' }))).toThrow(/"id"/);
    expect(() => parseInfoJson(JSON.stringify({ id: 'a', extractor: '', extractor_key: 'G' }))).toThrow(/"extractor"/);
  });
});

describe('guarded protocols', () => {
  it.each([
    ['http', true],
    ['https', true],
    ['http_dash_segments', true],
    ['m3u8', true],
    ['m3u8_native', true],
    ['https+m3u8_native', true],
    ['rtmp', false],
    ['rtmpe', false],
    ['rtmp_ffmpeg', false],
    ['rtsp', false],
    ['mms', false],
    ['https+rtmp', false],
  ])('%s → %s', (protocol, guarded) => {
    expect(isGuardedProtocol(protocol)).toBe(guarded);
  });

  it('asks yt-dlp for bestaudio, then best, only among formats fetched over HTTP(S) or HLS from http(s) URLs', () => {
    expect(GUARDED_FORMAT).toBe(
      [
        'bestaudio[protocol^=http][url^="https://"]',
        'bestaudio[protocol^=http][url^="http://"]',
        'bestaudio[protocol^=m3u8][url^="https://"]',
        'bestaudio[protocol^=m3u8][url^="http://"]',
        'best[protocol^=http][url^="https://"]',
        'best[protocol^=http][url^="http://"]',
        'best[protocol^=m3u8][url^="https://"]',
        'best[protocol^=m3u8][url^="http://"]',
      ].join('/'),
    );
  });
});

describe('cleanToolMessage', () => {
  it('keeps the ERROR lines and removes paths, proxy credentials and ANSI escapes', () => {
    const tail = [
      '[generic] Extracting URL: http://example.com/a.mp3',
      'WARNING: something at /usr/lib/python3/dist-packages/yt_dlp/x.py',
      "\x1b[0;31mERROR:\x1b[0m unable to open for writing: [Errno 13] Permission denied: '/tmp/job-1/download/source.m4a'",
      'ERROR: Unable to download webpage: <urlopen error Tunnel connection failed: 403 via http://us%3Aer:s3cr%40t@127.0.0.1:8899>',
      'ERROR: ffmpeg failed on file:/work/main/data/x.wav; please report this issue on  https://github.com/yt-dlp/yt-dlp/issues?q= , filling out the template',
    ].join('\n');
    const message = cleanToolMessage(tail, ['/tmp/job-1', 'http://us%3Aer:s3cr%40t@127.0.0.1:8899']);
    expect(message).toBe(
      [
        "ERROR: unable to open for writing: [Errno 13] Permission denied: '[redacted]/download/source.m4a'",
        'ERROR: Unable to download webpage: <urlopen error Tunnel connection failed: 403 via [redacted]>',
        'ERROR: ffmpeg failed on file:[path]',
      ].join('\n'),
    );
  });

  it('redacts the proxy user and password even when printed apart from the URL', () => {
    const message = cleanToolMessage('ERROR: proxy auth for us:er with s3cr@t failed', [
      'http://us%3Aer:s3cr%40t@127.0.0.1:8899',
    ]);
    expect(message).toBe('ERROR: proxy auth for [redacted] with [redacted] failed');
  });

  it('replaces absolute paths it was not told about, but keeps URLs', () => {
    const message = cleanToolMessage(
      'ERROR: cannot read /srv/data/ab/abcd/audio.wav or file:///etc/passwd from http://example.com/a/b.mp3 or http://[::1]:80/x/y',
      [],
    );
    expect(message).toBe('ERROR: cannot read [path] or [path] from http://example.com/a/b.mp3 or http://[::1]:80/x/y');
    expect(message).not.toMatch(/\/srv|\/etc/);
  });

  it('uses the last lines when there is no ERROR line, without progress noise', () => {
    const tail = 'one\ntwo\n[download]  50.0% of 1.00MiB\r[download] 100.0% of 1.00MiB\nthree\nfour\n';
    expect(cleanToolMessage(tail, [])).toBe('two\nthree\nfour');
  });

  it('stays short', () => {
    const message = cleanToolMessage(`ERROR: ${'x'.repeat(2000)}`, []);
    expect(message.length).toBeLessThanOrEqual(500);
    expect(message.endsWith('…')).toBe(true);
  });
});

/** yt-dlp's own words (Debian's 2023.03.04, then a current one where they differ), as seen through the egress guard or without it. */
const SAID = {
  pageWithoutMedia:
    'WARNING: [generic] Falling back on generic information extractor\nERROR: Unsupported URL: http://127.0.0.1:8000/page.html',
  notFound:
    "ERROR: [generic] None: Unable to download webpage: HTTP Error 404: Not Found (caused by <HTTPError 404: 'Not Found'>); please report this issue on  https://github.com/yt-dlp/yt-dlp/issues?q= , filling out the appropriate issue template. Confirm you are on the latest version using  yt-dlp -U",
  notFoundCurrent:
    'ERROR: [generic] e404: Unable to download webpage: HTTP Error 404: Not Found (caused by <HTTPError 404: Not Found>)',
  guards502:
    'ERROR: [generic] x: Unable to download webpage: HTTP Error 502: Bad Gateway (caused by <HTTPError 502: Bad Gateway>)',
  guards502Tunnel:
    "ERROR: [generic] None: Unable to download webpage: <urlopen error Tunnel connection failed: 502 Bad Gateway> (caused by URLError(OSError('Tunnel connection failed: 502 Bad Gateway')))",
  refusedConnect:
    "ERROR: [generic] None: Unable to download webpage: <urlopen error Tunnel connection failed: 403 Forbidden> (caused by URLError(OSError('Tunnel connection failed: 403 Forbidden')))",
  connectionRefused:
    "ERROR: [generic] None: Unable to download webpage: <urlopen error [Errno 111] Connection refused> (caused by URLError(ConnectionRefusedError(111, 'Connection refused')))",
  connectionRefusedCurrent:
    "ERROR: [generic] x: Unable to download webpage: [Errno 111] Connection refused (caused by TransportError('[Errno 111] Connection refused'))",
};

describe('classifyYtDlpFailure', () => {
  it.each([
    [SAID.pageWithoutMedia, 'not_media', null],
    ['ERROR: Unsupported URL: https://www.example.com/feed/', 'unsupported_url', null],
    [SAID.notFound, 'http_not_found', 404],
    [SAID.notFoundCurrent, 'http_not_found', 404],
    ['ERROR: unable to download video data: HTTP Error 403: Forbidden', 'http_access_denied', 403],
    ['ERROR: unable to download video data: HTTP Error 401: Unauthorized', 'http_access_denied', 401],
    ['ERROR: [generic] x: Unable to download webpage: HTTP Error 410: Gone', 'http_gone', 410],
    ['ERROR: [generic] x: Unable to download webpage: HTTP Error 429: Too Many Requests', 'http_rate_limited', 429],
    ['ERROR: [generic] x: Unable to download webpage: HTTP Error 500: Internal Server Error', 'http_server_error', 500],
    [SAID.guards502, 'http_server_error', 502],
    ['ERROR: [generic] x: Unable to download webpage: HTTP Error 405: Method Not Allowed', 'http_error', 405],
    ['[download] File is larger than max-filesize (37764 bytes > 1000 bytes). Aborting.', 'file_too_large', null],
    [SAID.refusedConnect, 'destination_refused', null],
    [SAID.guards502Tunnel, 'network_error', null],
    [SAID.connectionRefused, 'connection_refused', null],
    [SAID.connectionRefusedCurrent, 'connection_refused', null],
    ['ERROR: <urlopen error [Errno -2] Name or service not known>', 'host_not_found', null],
    ['ERROR: <urlopen error [Errno -3] Temporary failure in name resolution>', 'host_lookup_failed', null],
    ['ERROR: Connection to example.com timed out. (connect timeout=20.0)', 'connect_timeout', null],
    ['ERROR: The read operation timed out', 'no_answer', null],
    ['ERROR: [Errno 104] Connection reset by peer', 'network_error', null],
    ['ERROR: [generic] rtmp: Requested format is not available', 'unsupported_protocol', null],
    ['ERROR: [Errno 28] No space left on device', 'storage_full', null],
    ['ERROR: something new', 'download_failed', null],
    ['', 'download_failed', null],
  ])('%s → %s', (tail, code, httpStatus) => {
    expect(classifyYtDlpFailure(tail)).toEqual({ code, httpStatus });
  });
});

describe('describeYtDlpFailure', () => {
  const context = { hide: ['/srv/work/job-1'], url: 'http://media.example:8000/a.mp3', maxBytes: 1000 };

  it("says what happened in a sentence, and keeps yt-dlp's cleaned words as the detail", () => {
    expect(describeYtDlpFailure(SAID.notFound, context)).toEqual({
      code: 'http_not_found',
      message: 'Nothing was found at the source (HTTP 404).',
      detail:
        "ERROR: [generic] None: Unable to download webpage: HTTP Error 404: Not Found (caused by <HTTPError 404: 'Not Found'>)",
      httpStatus: 404,
    });
    expect(describeYtDlpFailure(SAID.pageWithoutMedia, context)).toEqual({
      code: 'not_media',
      message: 'The page at the URL holds no media the downloader can find.',
      detail: 'ERROR: Unsupported URL: http://127.0.0.1:8000/page.html',
      httpStatus: null,
    });
  });

  it("names the job URL's host and port for a connection that failed, and the limit for a file too large", () => {
    expect(describeYtDlpFailure(SAID.connectionRefusedCurrent, context)).toMatchObject({
      code: 'connection_refused',
      message: 'The source media.example:8000 refused the connection: no server is listening there.',
    });
    expect(describeYtDlpFailure(SAID.connectionRefused, { ...context, url: 'https://[::1]/a' })).toMatchObject({
      message: 'The source [::1]:443 refused the connection: no server is listening there.',
    });
    expect(describeYtDlpFailure('ERROR: <urlopen error [Errno -2] Name or service not known>', context)).toMatchObject({
      message: 'The host name media.example does not exist.',
    });
    expect(
      describeYtDlpFailure(
        '[download] File is larger than max-filesize (37764 bytes > 1000 bytes). Aborting.',
        context,
      ),
    ).toMatchObject({ code: 'file_too_large', message: 'The download is larger than the limit of 1000 bytes.' });
  });

  it('keeps paths and the proxy out of the detail', () => {
    const error = describeYtDlpFailure(
      'ERROR: unable to open for writing: /srv/work/job-1/download/source.mp3 via http://job:t0ken@127.0.0.1:9/',
      { ...context, hide: [...context.hide, 'http://job:t0ken@127.0.0.1:9'] },
    );
    expect(error.code).toBe('download_failed');
    expect(error.message).toBe('The downloader could not get the media.');
    expect(error.detail).not.toMatch(/\/srv|t0ken/);
  });
});
