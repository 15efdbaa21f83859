"""
A yt-dlp extractor plugin for tests only: a fake video "site" served by the test media server
(test/support/media-server.ts) on 127.0.0.1. Never matches a real site.

yt-dlp (2023.03.04, yt_dlp/plugins.py) imports every module of the `yt_dlp_plugins.extractor`
namespace package it finds on sys.path (so PYTHONPATH=<this folder's parent>/ytdlp-plugins
works) and in its user config dirs, and puts each class whose name ends in "IE" ahead of every
built-in extractor (yt_dlp/extractor/extractors.py), the generic one included.

Two URL forms name the same media ID:
    http://127.0.0.1:PORT/watch?v=ID
    http://127.0.0.1:PORT/v/ID
The extractor asks the site's API at http://127.0.0.1:PORT/api/media/ID for
{"title": ..., "audio": "/path/of/the/file", "ext": "m4a"} and returns one plain-HTTP audio
format pointing at that path. extractor_key: "LoopbackMedia".
"""

from yt_dlp.extractor.common import InfoExtractor
from yt_dlp.utils import urljoin


class LoopbackMediaIE(InfoExtractor):
    IE_NAME = 'loopbackmedia'
    IE_DESC = False  # not listed in --list-extractors descriptions
    # Only the IPv4 loopback address with an explicit port; nothing after the ID but a query
    # parameter (watch form) or the end of the path (v/ form).
    _VALID_URL = (
        r'http://127\.0\.0\.1:(?P<port>[0-9]{1,5})/'
        r'(?:watch\?(?:[^#]*&)?v=(?P<id>[A-Za-z0-9_-]+)(?:[&#]|$)|v/(?P<id2>[A-Za-z0-9_-]+)/?(?:[?#]|$))'
    )

    def _real_extract(self, url):
        mobj = self._match_valid_url(url)
        media_id = mobj.group('id') or mobj.group('id2')
        base = f'http://127.0.0.1:{mobj.group("port")}/'
        meta = self._download_json(urljoin(base, f'api/media/{media_id}'), media_id, note='Downloading media API JSON')
        return {
            'id': media_id,
            'title': meta['title'],
            'webpage_url': urljoin(base, f'watch?v={media_id}'),
            'formats': [{
                'format_id': 'audio',
                'url': urljoin(base, meta['audio']),
                'ext': meta.get('ext'),
                'vcodec': 'none',
                'protocol': 'http',
            }],
        }
