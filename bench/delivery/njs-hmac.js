// The benchmark's "njs hmac" case only: what it costs nginx to check the app's HMAC signature
// itself, in njs, per request (src/delivery/signed-url.ts has the scheme). The secret comes from
// the environment at configuration time: importing the fs module to read a file would make every
// request's VM clone heavier. Returns the remaining lifetime in seconds, or '' (refuse).
import crypto from 'crypto';

const secret = process.env.SOURCE_FETCH_BENCH_SIGNING_SECRET;
const CANONICAL = /^expires=([0-9]{1,12})&sig=([A-Za-z0-9_-]{43})$/;

function remaining(r) {
  const query = CANONICAL.exec(r.variables.args || '');
  if (!query) return '';
  const mac = crypto
    .createHmac('sha256', secret)
    .update(`artifact-v1\n${r.variables.sf_njs_cid}\n${r.variables.sf_njs_name}\n${query[1]}`)
    .digest('base64url');
  if (mac !== query[2]) return '';
  const left = Number(query[1]) - Math.floor(Date.now() / 1000);
  return left > 0 ? String(left) : '';
}

export default { remaining };
