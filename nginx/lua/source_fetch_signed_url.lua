-- nginx checks the app's signed artifact URLs itself, so that it serves them without a trip to the
-- app per request (nginx/templates/default.conf.template). The scheme is src/delivery/signed-url.ts:
-- HMAC-SHA256 under URL_SIGNING_SECRET (its UTF-8 bytes) over `artifact-v1\n<cid>\n<name>\n<expires>`,
-- or, for a URL that names its download (`&filename=`), over
-- `artifact-v2\n<cid>\n<name>\n<expires>\n<filename, percent-decoded>`, in unpadded base64url.
-- Only a yes is nginx's to give: on anything else the app answers, with its problem document
-- (signature_invalid, signature_expired) or, if nginx holds another secret than the app (none, or
-- an old one during a rotation), with the artifact.
--
-- A named URL's answer carries the app's Content-Disposition for that name (src/delivery/
-- representation.ts contentDisposition), made here byte for byte as the app makes it. The name is
-- the app's own (download-name.ts made it safe before signing it), so it is only encoded here.
--
-- Each worker remembers the URLs whose signature held (by the request line's URI, of which the
-- content id, name, expiry, signature and filename are all parts), so that a player's many range
-- requests on one URL pay the HMAC once; the expiry is still checked on every request. A signature
-- that does not hold is not remembered.

local ffi = require "ffi"
local bit = require "bit"

ffi.cdef [[
typedef struct evp_md_st EVP_MD;
const EVP_MD *EVP_sha256(void);
unsigned char *HMAC(const EVP_MD *evp_md, const void *key, int key_len, const unsigned char *d,
                    size_t n, unsigned char *md, unsigned int *md_len);
]]
-- OpenSSL's libcrypto, which nginx is linked with. Resolved here, at start-up (init_by_lua), so
-- that an nginx without it fails to start rather than hand every signed URL to the app.
local HMAC, EVP_sha256 = ffi.C.HMAC, ffi.C.EVP_sha256

local band, bor, bxor, lshift, rshift = bit.band, bit.bor, bit.bxor, bit.lshift, bit.rshift

-- Read once, in nginx's master (which has the whole environment); shorter than the app accepts
-- (32) counts as none.
local secret = os.getenv("URL_SIGNING_SECRET") or ""
local usable = #secret >= 32

local MAC_BYTES, SIGNATURE_LENGTH = 32, 43
local mac = ffi.new("unsigned char[?]", MAC_BYTES)
local mac_length = ffi.new("unsigned int[1]")
local encoded = ffi.new("unsigned char[?]", SIGNATURE_LENGTH)
local BASE64URL = ffi.new("const unsigned char[65]", "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")

-- Whether `given` (43 base64url characters: the location checked its form) is the MAC of `message`.
-- The MAC and its encoding stay in C buffers and are compared in constant time: as a Lua string,
-- interning would compare them byte by byte with strings of the same hash, the given one included.
-- Compared as text, like the app, so that the spare bits of the last character cannot vary.
local function signature_holds(message, given)
  HMAC(EVP_sha256(), secret, #secret, message, #message, mac, mac_length)
  local at = 0
  for i = 0, MAC_BYTES - 3, 3 do
    local n = bor(lshift(mac[i], 16), lshift(mac[i + 1], 8), mac[i + 2])
    encoded[at] = BASE64URL[rshift(n, 18)]
    encoded[at + 1] = BASE64URL[band(rshift(n, 12), 63)]
    encoded[at + 2] = BASE64URL[band(rshift(n, 6), 63)]
    encoded[at + 3] = BASE64URL[band(n, 63)]
    at = at + 4
  end
  local n = bor(lshift(mac[MAC_BYTES - 2], 16), lshift(mac[MAC_BYTES - 1], 8))
  encoded[at] = BASE64URL[rshift(n, 18)]
  encoded[at + 1] = BASE64URL[band(rshift(n, 12), 63)]
  encoded[at + 2] = BASE64URL[band(rshift(n, 6), 63)]
  local bytes = ffi.cast("const unsigned char *", given)
  local difference = 0
  for i = 0, SIGNATURE_LENGTH - 1 do
    difference = bor(difference, bxor(encoded[i], bytes[i]))
  end
  return difference == 0
end

local function percent_encoded(byte)
  return string.format("%%%02X", string.byte(byte))
end

--- RFC 6266's header for a download name, as contentDisposition (src/delivery/representation.ts)
--- makes it: an ASCII fallback with each character (a UTF-8 sequence) outside printable ASCII,
--- and each `"`, `\` and `%`, replaced by `_`; and the name's UTF-8 with every byte but the
--- letters, digits and `-._!~` percent-encoded (upper-case hex) as RFC 8187 `filename*`.
local function content_disposition(filename)
  local fallback = filename:gsub("[\192-\255][\128-\191]*", "_"):gsub('[%z\1-\31\127-\255"\\%%]', "_")
  local exact = filename:gsub("[^A-Za-z0-9%-._!~]", percent_encoded)
  return 'inline; filename="' .. fallback .. '"; filename*=UTF-8\'\'' .. exact
end

-- URI -> { expires, its HTTP date, the Content-Disposition of a named URL or false }. Bounded per
-- worker; forgotten wholesale when full.
local REMEMBERED = 1024
local held, count = {}, 0

local M = {}

--- The `Expires` of the answer (the signature's expiry as an HTTP date) when the request's
--- signature holds and has not expired, else ''. The location has already checked the query's
--- form (`expires=<1-12 digits>&sig=<43 base64url characters>`, then `&filename=<percent-encoded
--- UTF-8>` or nothing) and captured the cid and name. For a URL that names its download, sets
--- $source_fetch_content_disposition to that name's header.
function M.signed_expires()
  if not usable then return "" end
  local var = ngx.var
  local uri = var.request_uri
  local known = held[uri]
  if known == nil then
    local expires = var.arg_expires
    local base = var.source_fetch_signed_cid .. "\n" .. var.source_fetch_signed_name .. "\n" .. expires
    local encoded_filename = var.arg_filename
    local filename = encoded_filename and ngx.unescape_uri(encoded_filename)
    local message = filename and ("artifact-v2\n" .. base .. "\n" .. filename) or ("artifact-v1\n" .. base)
    if not signature_holds(message, var.arg_sig) then return "" end
    local at = tonumber(expires)
    known = { at, ngx.http_time(at), filename and content_disposition(filename) or false }
    if count >= REMEMBERED then held, count = {}, 0 end
    held[uri] = known
    count = count + 1
  end
  -- As the app: void from the start of its expiry second (ngx.time() is whole seconds).
  if known[1] <= ngx.time() then return "" end
  if known[3] then var.source_fetch_content_disposition = known[3] end
  return known[2]
end

return M
