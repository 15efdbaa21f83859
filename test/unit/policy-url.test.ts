import { describe, expect, it } from 'vitest';
import { ServiceError } from '../../src/errors.js';
import { aliasKey, destinationOf, MAX_SOURCE_URL_LENGTH, parseSourceUrl } from '../../src/policy/source-url.js';

function codeOf(raw: string): string {
  try {
    parseSourceUrl(raw);
    return 'accepted';
  } catch (err) {
    expect(err).toBeInstanceOf(ServiceError);
    expect((err as ServiceError).kind).toBe('invalid_input');
    return (err as ServiceError).code;
  }
}

describe('parseSourceUrl', () => {
  it.each([
    ['https://media.example/watch?v=1', 'accepted'],
    ['http://media.example:8080/a', 'accepted'],
    ['  https://media.example/  ', 'accepted'],
    ['', 'url_invalid'],
    ['not a url', 'url_invalid'],
    ['//media.example/a', 'url_invalid'],
    ['/relative/path', 'url_invalid'],
    ['http://', 'url_invalid'],
    ['http://exa mple.com/', 'url_invalid'],
    ['http://a\tb.example/', 'url_invalid'],
    ['http://media.example/\nX-Injected: 1', 'url_invalid'],
    ['http://media.example/\r\n', 'url_invalid'],
    ['http://media.example/\u0000', 'url_invalid'],
    ['http://media.example../', 'url_invalid'],
    ['http://.media.example/', 'url_invalid'],
    ['http://a..b.example/', 'url_invalid'],
    ['http://./', 'url_host_missing'],
    ['ftp://media.example/file', 'url_scheme_not_allowed'],
    ['file:///etc/passwd', 'url_scheme_not_allowed'],
    ['gopher://127.0.0.1:6379/_INFO', 'url_scheme_not_allowed'],
    ['dict://127.0.0.1:11211/stats', 'url_scheme_not_allowed'],
    ['javascript:alert(1)', 'url_scheme_not_allowed'],
    ['data:text/plain,hi', 'url_scheme_not_allowed'],
    ['ws://media.example/', 'url_scheme_not_allowed'],
    ['http://user@media.example/', 'url_credentials_not_allowed'],
    ['http://user:pass@media.example/', 'url_credentials_not_allowed'],
    ['http://:pass@media.example/', 'url_credentials_not_allowed'],
    ['http://evil.com@127.0.0.1/', 'url_credentials_not_allowed'],
    ['http://media.example@evil.com/', 'url_credentials_not_allowed'],
    ['https://token%40x@media.example/', 'url_credentials_not_allowed'],
    [
      'https://media.example/a.m3u8#__youtubedl_smuggle={"http_headers":{"Ytdl-request-proxy":"__noproxy__"}}',
      'url_smuggled_data',
    ],
    ['https://media.example/a.m3u8#__youtubedl_smuggle=%7B%7D', 'url_smuggled_data'],
    ['https://media.example/__youtubedl_smuggle/a.mp3', 'url_smuggled_data'],
    ['https://media.example/a?x=__YouTubeDL_Smuggle', 'url_smuggled_data'],
    ['https://media.example/a#%5F%5Fyoutubedl%5Fsmuggle=1', 'url_smuggled_data'],
    ['https://media.example/a#%255F%255Fyoutubedl%255Fsmuggle=1', 'url_smuggled_data'],
    ['https://media.example/a#%E0%A4%A__youtubedl_smuggle', 'url_smuggled_data'],
    ['https://media.example/a#youtubedl_smuggle', 'accepted'],
    // Found by the URL property test (seed -445558100): refused before any destination check.
    ['http://A:0', 'port_invalid'],
    ['https://media.example:0/a', 'port_invalid'],
    ['https://media.example:00/a', 'port_invalid'],
    ['https://media.example:65535/a', 'accepted'],
  ])('%j → %s', (raw, code) => {
    expect(codeOf(raw)).toBe(code);
  });

  it('drops the fragment: it is never sent to a server, and the downloader must not see one', () => {
    expect(parseSourceUrl('https://media.example/a.mp3?x=1#t=30').href).toBe('https://media.example/a.mp3?x=1');
    expect(parseSourceUrl('https://media.example/a.mp3#').href).toBe('https://media.example/a.mp3');
  });

  it('limits length to 2048 characters, before and after serialisation', () => {
    const base = 'https://media.example/';
    expect(codeOf(base + 'a'.repeat(MAX_SOURCE_URL_LENGTH - base.length))).toBe('accepted');
    expect(codeOf(base + 'a'.repeat(MAX_SOURCE_URL_LENGTH - base.length + 1))).toBe('url_too_long');
    // 400 characters that percent-encode to 2400: the stored href would exceed the limit.
    expect(codeOf(base + 'é'.repeat(400))).toBe('url_too_long');
  });

  it.each([
    // The host checked is the host WHATWG (and hence the fetch of url.href) connects to.
    ['http://evil.com\\@127.0.0.1/', 'evil.com', 80, 'http://evil.com/@127.0.0.1/'],
    ['http://127.0.0.1#@evil.com', '127.0.0.1', 80, 'http://127.0.0.1/'],
    ['http://127.0.0.1?@evil.com/', '127.0.0.1', 80, 'http://127.0.0.1/?@evil.com/'],
    ['http://evil.com\\\\127.0.0.1/', 'evil.com', 80, 'http://evil.com//127.0.0.1/'],
    ['HTTP://MEDIA.Example:80/Path', 'media.example', 80, 'http://media.example/Path'],
    ['https://media.example:443/', 'media.example', 443, 'https://media.example/'],
    ['https://media.example:8443/', 'media.example', 8443, 'https://media.example:8443/'],
    ['http://media.example./', 'media.example', 80, 'http://media.example./'],
    ['http://127.0.0.1./', '127.0.0.1', 80, 'http://127.0.0.1/'],
    ['http://１２７.０.０.１/', '127.0.0.1', 80, 'http://127.0.0.1/'],
    ['http://2130706433/', '127.0.0.1', 80, 'http://127.0.0.1/'],
    ['http://0x7f.1/', '127.0.0.1', 80, 'http://127.0.0.1/'],
    ['http://bücher.example/', 'xn--bcher-kva.example', 80, 'http://xn--bcher-kva.example/'],
    ['http://BÜCHER.example/', 'xn--bcher-kva.example', 80, 'http://xn--bcher-kva.example/'],
    ['http://ex%41mple.com/', 'example.com', 80, 'http://example.com/'],
    ['http://[::FFFF:127.0.0.1]:8080/', '::ffff:7f00:1', 8080, 'http://[::ffff:7f00:1]:8080/'],
    ['https://[2606:4700:0:0::1111]/', '2606:4700::1111', 443, 'https://[2606:4700::1111]/'],
  ])('%j is checked as %s:%i', (raw, host, port, href) => {
    const url = parseSourceUrl(raw);
    expect(destinationOf(url)).toEqual({ host, port });
    expect(url.href).toBe(href);
  });
});

describe('aliasKey', () => {
  const key = (raw: string): string => aliasKey(parseSourceUrl(raw));

  it.each([
    ['HTTPS://Media.Example/Watch?v=1', 'https://media.example/Watch?v=1'],
    ['https://media.example:443/a', 'https://media.example/a'],
    ['http://media.example:80/a', 'http://media.example/a'],
    ['http://media.example:8080/a', 'http://media.example:8080/a'],
    ['https://media.example./a', 'https://media.example/a'],
    ['https://bücher.example/a', 'https://xn--bcher-kva.example/a'],
    ['https://media.example/a#t=10', 'https://media.example/a'],
    ['https://media.example/a?', 'https://media.example/a'],
    ['https://media.example/a?&&', 'https://media.example/a'],
    ['https://media.example', 'https://media.example/'],
    ['https://media.example/A/b', 'https://media.example/A/b'],
    ['https://media.example/a%2Fb', 'https://media.example/a%2Fb'],
    ['https://media.example/a?b=2&a=1', 'https://media.example/a?a=1&b=2'],
    ['https://media.example/a?v=x&list=y&t=3', 'https://media.example/a?list=y&t=3&v=x'],
    ['https://media.example/a?b=1&a=2&b=0', 'https://media.example/a?a=2&b=1&b=0'],
    ['https://media.example/a?b=1&&a=2', 'https://media.example/a?a=2&b=1'],
    ['https://media.example/a?x&a=1', 'https://media.example/a?a=1&x'],
    ['https://media.example/a?q=a b', 'https://media.example/a?q=a%20b'],
    ['https://media.example/a?q=A&Q=b', 'https://media.example/a?Q=b&q=A'],
  ])('%s → %s', (raw, expected) => {
    expect(key(raw)).toBe(expected);
  });

  it('keeps distinct URLs distinct', () => {
    expect(key('https://media.example/a?x=1&x=2')).not.toBe(key('https://media.example/a?x=2&x=1'));
    expect(key('https://media.example/A')).not.toBe(key('https://media.example/a'));
    expect(key('https://media.example/a?q=%2B')).not.toBe(key('https://media.example/a?q=+'));
    expect(key('http://media.example/a')).not.toBe(key('https://media.example/a'));
  });
});
