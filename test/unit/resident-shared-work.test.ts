import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RESIDENT_SCRIPT } from '../../src/sandbox/resident.js';
import { inspectYtDlpLauncher } from '../../src/tools/ytdlp-launcher.js';
import { writeSelfSignedCertificate } from '../support/self-signed-certificate.js';
import { currentYtDlps, DEBIAN_YTDLP, ytdlpVersion } from '../support/ytdlp-under-test.js';

const run = promisify(execFile);

/**
 * What the resident sandbox shares with its runs (resident.py, share_with_runs), driven in plain
 * Python with the real yt-dlp, outside any namespace, as a run would meet it: YoutubeDL objects
 * made after the sharing. Their HTTPS requests go to a TLS server on loopback whose certificate
 * is not in the CA bundle yt-dlp reads (certifi's, pointed at a copy); then the certificate is
 * added to that file. Prints what each step saw, as JSON.
 */
const SCRIPT = String.raw`
import http.server, json, os, shutil, ssl, sys, threading
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import resident
launcher, cert, key, folder = sys.argv[2:6]

yt_dlp = resident.import_ytdlp(launcher)
resident.warm_up(yt_dlp)
import certifi
bundle = os.path.join(folder, 'bundle.pem')
shutil.copy(certifi.where(), bundle)
certifi.where = lambda: bundle

loads = []
load_verify_locations = ssl.SSLContext.load_verify_locations
def counted(self, *args, **kwargs):
    loads.append(1)
    return load_verify_locations(self, *args, **kwargs)
ssl.SSLContext.load_verify_locations = counted

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header('Content-Length', '7')
        self.end_headers()
        self.wfile.write(b'trusted')
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
tls.load_cert_chain(cert, key)
server.socket = tls.wrap_socket(server.socket, server_side=True)
threading.Thread(target=server.serve_forever, daemon=True).start()
url = f'https://127.0.0.1:{server.server_address[1]}/'

params = {'quiet': True, 'no_warnings': True, 'allowed_extractors': ['default', '-generic', 're:youtube.*']}
def extractors():
    return list(yt_dlp.YoutubeDL(params)._ies)
chosen_before = extractors()
choose = yt_dlp.utils.orderedSet_from_options

loads.clear()
shared = resident.share_with_runs(yt_dlp)
report = {'shared': shared, 'loads_at_sharing': len(loads)}

def fetch():
    try:
        return yt_dlp.YoutubeDL(params).urlopen(url).read().decode()
    except Exception as err:
        return 'certificate refused' if 'CERTIFICATE_VERIFY_FAILED' in str(err) else f'{type(err).__name__}: {err}'

report['untrusted'] = [fetch(), fetch()]
report['loads_untrusted'] = len(loads)
with open(bundle, 'a') as f, open(cert) as c:
    f.write('\n' + c.read())
report['trusted'] = [fetch(), fetch()]
report['loads_trusted'] = len(loads)

# fetch()'s first YoutubeDL made the list for these params; these two replay it.
report['same_extractors'] = [extractors() == chosen_before, extractors() == chosen_before]
# The one instance among the extractors ('end', last when named), which each YoutubeDL binds to itself.
with_end = {**params, 'allowed_extractors': ['default', 'end']}
first_ydl, second_ydl = yt_dlp.YoutubeDL(with_end), yt_dlp.YoutubeDL(with_end)
unsupported = [next(iter(ydl._ies_instances.values())) for ydl in (first_ydl, second_ydl)]
report['own_unsupported'] = [len(first_ydl._ies_instances) == 1 and type(unsupported[0]).__name__ == 'UnsupportedURLIE', unsupported[0] is not unsupported[1], unsupported[0]._downloader is first_ydl, unsupported[1]._downloader is second_ydl]
options, aliases = ['default', '-youtube'], {'all': ['a', 'youtube', 'b', 'a'], 'default': ['b', 'youtube', 'a']}
first = yt_dlp.utils.orderedSet_from_options(options, aliases)
first.append('changed by its caller')
report['choice'] = [first[:-1], yt_dlp.utils.orderedSet_from_options(options, aliases), choose(options, aliases)]
print(json.dumps(report))
`;

let dir: string;
let cert: string;
let key: string;
beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'sf-shared-'));
  ({ cert, key } = await writeSelfSignedCertificate(dir, '127.0.0.1'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe.each([DEBIAN_YTDLP, ...currentYtDlps()].map((launcher) => ({ launcher, version: ytdlpVersion(launcher) })))(
  'what the resident sandbox shares with its runs, yt-dlp $version',
  ({ launcher }) => {
    it('one TLS context per state of the CA bundle, which still decides what is trusted; the same choice and list of extractors', async () => {
      const folder = await mkdtemp(path.join(dir, 'run-'));
      // The interpreter the service starts the resident with, for this launcher.
      const inspection = await inspectYtDlpLauncher(launcher);
      if (!inspection.importable) throw new Error(`${launcher}: ${inspection.reason}`);
      const [python, ...pythonArgs] = inspection.interpreter;
      const { stdout } = await run(
        python!,
        [...pythonArgs, '-c', SCRIPT, RESIDENT_SCRIPT, launcher, cert, key, folder],
        {
          timeout: 60_000,
        },
      );
      const report = JSON.parse(stdout) as Record<string, unknown>;
      expect(report.shared).toEqual(['tls context', 'extractor choice', 'extractor list']);
      // The bundle is read once at sharing, not again by each YoutubeDL's requests...
      expect(report.loads_at_sharing).toBe(1);
      expect(report.untrusted).toEqual(['certificate refused', 'certificate refused']);
      expect(report.loads_untrusted).toBe(1);
      // ...until the file changes: then once more, and the certificate added is trusted.
      expect(report.trusted).toEqual(['trusted', 'trusted']);
      expect(report.loads_trusted).toBe(2);
      expect(report.same_extractors).toEqual([true, true]);
      // Each YoutubeDL has its own UnsupportedURLIE, bound to it.
      expect(report.own_unsupported).toEqual([true, true, true, true]);
      // Each caller gets its own list, equal to yt-dlp's own function's.
      expect(report.choice).toEqual([
        ['b', 'a'],
        ['b', 'a'],
        ['b', 'a'],
      ]);
    });
  },
);
