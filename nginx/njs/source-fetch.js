// nginx checks the app's signed artifact URLs itself, so that it serves them without a trip to the
// app per request (nginx/templates/default.conf.template). The scheme is src/delivery/signed-url.ts:
// HMAC-SHA256 under URL_SIGNING_SECRET (its UTF-8 bytes) over `artifact-v1\n<cid>\n<name>\n<expires>`,
// in unpadded base64url. Only a yes is nginx's to give: on anything else the app answers, with its
// problem document (signature_invalid, signature_expired) or, if nginx holds another secret than
// the app (none, or an old one during a rotation), with the artifact.

import crypto from 'crypto';

// Read once, at configuration time; shorter than the app accepts (32) counts as none.
const secret = process.env.URL_SIGNING_SECRET || '';
const usable = secret.length >= 32;

/**
 * The `Expires` of the answer (the signature's expiry as an HTTP date) when the request's signature
 * holds and has not expired, else ''. The location has already checked the query's form
 * (`expires=<1-12 digits>&sig=<43 base64url characters>`) and captured the cid and name.
 * Reads variables only: `r.args` would parse the query into an object on every request.
 */
function signedExpires(r) {
  if (!usable) return '';
  const v = r.variables;
  const expires = v.arg_expires;
  const given = v.arg_sig;
  const mac = crypto
    .createHmac('sha256', secret)
    .update(`artifact-v1\n${v.source_fetch_signed_cid}\n${v.source_fetch_signed_name}\n${expires}`)
    .digest('base64url');
  // Compared through a hash of each, so that the time a comparison takes tells nothing of the MAC
  // (njs has no timingSafeEqual, and a loop over the characters costs more than the HMAC).
  if (blind(mac) !== blind(given)) return '';
  // As the app: void from the start of its expiry second.
  const expiresAtMs = expires * 1000;
  return expiresAtMs > Date.now() ? new Date(expiresAtMs).toUTCString() : '';
}

function blind(text) {
  return crypto.createHash('sha256').update(text).digest('base64');
}

export default { signedExpires };
