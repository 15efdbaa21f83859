import { describe, expect, it } from 'vitest';
import { COOKIES_SAFE_SINCE, cookiesRefusal, isAtLeast, parseYtDlpVersion } from '../../src/tools/ytdlp-version.js';

describe('yt-dlp versions', () => {
  it.each([
    ['2023.03.04', [2023, 3, 4, 0]],
    ['2026.10.26', [2026, 10, 26, 0]],
    ['2024.08.06.232710', [2024, 8, 6, 232710]],
    [' 2023.7.6\n', [2023, 7, 6, 0]],
  ])('reads %j', (text, parsed) => {
    expect(parseYtDlpVersion(text)).toEqual(parsed);
  });

  it.each([null, '', 'yt-dlp 2023.03.04', '2023.03', 'v2023.03.04', '2023.03.04-1', 'stable@2023.03.04'])(
    'reads nothing from %j',
    (text) => {
      expect(parseYtDlpVersion(text)).toBeNull();
    },
  );

  it.each([
    ['2023.07.06', true],
    ['2023.07.06.000001', true],
    ['2023.7.7', true],
    ['2024.01.01', true],
    ['2026.10.26', true],
    ['2023.07.05.235959', false],
    ['2023.06.22', false],
    ['2023.03.04', false],
    ['2022.12.31', false],
    ['not a version', false],
    [null, false],
  ] as const)('%j is at least 2023.07.06: %s', (version, expected) => {
    expect(isAtLeast(version, '2023.07.06')).toBe(expected);
  });
});

describe('cookies only for a yt-dlp that keeps them to their own domains', () => {
  it('are allowed from 2023.07.06 (CVE-2023-35934 fixed), nightlies included', () => {
    expect(COOKIES_SAFE_SINCE).toBe('2023.07.06');
    for (const version of ['2023.07.06', '2025.04.30', '2026.10.26', '2024.08.06.232710'])
      expect(cookiesRefusal('/usr/bin/yt-dlp', version)).toBeNull();
  });

  it('are refused to an older one, naming its version, path, the CVE and what to do', () => {
    const reason = cookiesRefusal('/usr/bin/yt-dlp', '2023.03.04');
    expect(reason).toMatch(
      /^yt-dlp 2023\.03\.04 \(\/usr\/bin\/yt-dlp\) is older than 2023\.07\.06: it sends a cookies file's cookies to other hosts than theirs, on redirects and to fragments \(CVE-2023-35934\)/,
    );
    expect(reason).toMatch(/install a current yt-dlp \(docs\/yt-dlp\.md\), or unset YTDLP_COOKIES_FILE$/);
  });

  it('are refused when the version cannot be read, or is not a release date', () => {
    expect(cookiesRefusal('yt-dlp, not found', null)).toMatch(
      /^the version of yt-dlp \(yt-dlp, not found\) cannot be read, and yt-dlp before 2023\.07\.06 sends .*CVE-2023-35934/,
    );
    expect(cookiesRefusal('/opt/custom/yt-dlp', 'custom build')).toMatch(
      /^yt-dlp \(\/opt\/custom\/yt-dlp\) names no release date as its version \("custom build"\)/,
    );
  });
});
