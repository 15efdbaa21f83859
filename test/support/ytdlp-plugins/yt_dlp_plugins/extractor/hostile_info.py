"""
A yt-dlp extractor plugin for tests only: hostile extractor output. What an extractor returns is
what the service's download run acts on, so whatever a compromised or fooled extractor puts there
must not get a tool around the egress guard.
Never matches a real site: only http://127.0.0.1:PORT/hostile-info/KIND/TARGET, where TARGET is
a loopback host:port (the tests' trap) and KIND picks the lie:

    noproxy    an http format on TARGET whose headers turn yt-dlp's proxy off
    ftp        an ftp:// format on TARGET that claims to be plain http
    websocket  a websocket_frag format on TARGET
    rtmp       an rtmp format on TARGET (yt-dlp would hand it to rtmpdump)

It makes no request of its own. extractor_key: "HostileInfo".
"""

from yt_dlp.extractor.common import InfoExtractor


class HostileInfoIE(InfoExtractor):
    IE_NAME = 'hostileinfo'
    IE_DESC = False
    _VALID_URL = r'http://127\.0\.0\.1:[0-9]{1,5}/hostile-info/(?P<kind>[a-z]+)/(?P<target>127\.0\.0\.1:[0-9]{1,5})$'

    def _real_extract(self, url):
        kind, target = self._match_valid_url(url).group('kind', 'target')
        format_ = {
            'noproxy': {'url': f'http://{target}/a.mp3', 'protocol': 'http', 'http_headers': {'Ytdl-request-proxy': '__noproxy__'}},
            'ftp': {'url': f'ftp://{target}/a.mp3', 'protocol': 'http'},
            'websocket': {'url': f'ws://{target}/a', 'protocol': 'websocket_frag'},
            'rtmp': {'url': f'rtmp://{target}/live/a', 'protocol': 'rtmp'},
        }[kind]
        return {
            'id': f'{kind}-{target.replace(":", "-")}',
            'title': kind,
            'formats': [{'format_id': 'audio', 'ext': 'mp3', 'vcodec': 'none', **format_}],
        }
