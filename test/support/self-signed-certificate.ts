import { execFile } from 'node:child_process';
import { isIP } from 'node:net';
import path from 'node:path';
import { promisify } from 'node:util';

/**
 * A P-256 key and a self-signed certificate for `host` (a name or an IP address, named in the
 * certificate's subjectAltName), valid for a day, made by openssl as key.pem and cert.pem in `dir`.
 */
export async function writeSelfSignedCertificate(dir: string, host: string): Promise<{ key: string; cert: string }> {
  const [key, cert] = [path.join(dir, 'key.pem'), path.join(dir, 'cert.pem')];
  await promisify(execFile)('openssl', [
    'req',
    '-x509',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:prime256v1',
    '-nodes',
    '-subj',
    `/CN=${host}`,
    '-addext',
    `subjectAltName=${isIP(host) ? 'IP' : 'DNS'}:${host}`,
    '-days',
    '1',
    '-keyout',
    key,
    '-out',
    cert,
  ]);
  return { key, cert };
}
