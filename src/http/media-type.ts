/**
 * The one rule that says whether a request body is declared as JSON, for every path that takes
 * one (src/http/json-request-body.ts: submitSource and submitSourceBatch). Anything it refuses
 * is answered 415 `unsupported_media_type`.
 *
 * The Content-Type is read as the WHATWG MIME Sniffing standard parses one (as browsers and fetch
 * do): its essence is what comes before the first `;`, without surrounding whitespace, compared
 * without regard to case; parameters, well-formed or not, decide nothing (the body is read as
 * UTF-8 whatever `charset` says). The essence must be `application/json` or a `+json` type
 * (`application/<name>+json`), type and subtype made of HTTP token characters. So
 * `application/json;`, `application/json ;`, `application/json; charset` and
 * `application/vnd.x+json` are JSON; `text/json`, `application/json-seq`, `application/ json` and
 * a missing Content-Type are not.
 */
const JSON_ESSENCE = /^application\/(?:[!#$%&'*+.^_`|~0-9A-Za-z-]+\+)?json$/i;
/** HTTP whitespace at either end (space, tab, CR, LF). */
const OUTER_WHITESPACE = /^[\t\n\r ]+|[\t\n\r ]+$/g;

export function isJsonMediaType(contentType: string | undefined): boolean {
  if (contentType === undefined) return false;
  const semicolon = contentType.indexOf(';');
  const essence = (semicolon < 0 ? contentType : contentType.slice(0, semicolon)).replace(OUTER_WHITESPACE, '');
  return JSON_ESSENCE.test(essence);
}
