-- nginx remembers, for a few seconds, that the app let a request's API key in, so that a client
-- reading an artifact in many ranges with its key is answered by nginx alone rather than through
-- the app for every range (nginx/templates/default.conf.template). The app alone judges keys: nginx
-- never holds the key table, and only remembers the app's yes.
--
-- What is remembered is the app's yes to exactly the request's key headers: the app's key decision
-- (src/http/api-key.ts presentedKey) depends on the values of Authorization and X-API-Key and
-- nothing else, so a later request with the same values gets the same decision. A request that
-- repeats either header is never remembered nor answered here (the app joins repeats, nginx would
-- see them apart). The values are remembered as an HMAC-SHA256 under a random secret drawn at
-- each start of nginx, never as the key or a plain digest of it: the shared dictionary holds
-- nothing that would identify a key outside this nginx's life, and nothing here is logged.
--
-- A yes is kept VERDICT_SECONDS from when the app gave it, never prolonged by the requests it
-- lets in: a key taken out of the app's API_KEYS (an app restart) still reads through nginx for
-- at most that long after the app's last yes. Requests answered here are not counted against the
-- key's rate limit (the app counts those it answers: at least one every VERDICT_SECONDS for a key
-- in use); they are counted in nginx's usage log for eviction, as signed URLs are.

local ffi = require "ffi"
-- Declares OpenSSL's HMAC and EVP_sha256 (through ffi.cdef, which may declare them only once).
require "source_fetch_signed_url"

ffi.cdef [[
int RAND_bytes(unsigned char *buf, int num);
]]

local HMAC, EVP_sha256 = ffi.C.HMAC, ffi.C.EVP_sha256

-- Drawn once, in nginx's master (init_by_lua), so every worker shares it; a start without
-- randomness fails rather than runs with a guessable secret.
local SECRET_BYTES = 32
local secret = ffi.new("unsigned char[?]", SECRET_BYTES)
assert(ffi.C.RAND_bytes(secret, SECRET_BYTES) == 1, "RAND_bytes failed")

local VERDICT_SECONDS = 2
-- The app's Cache-Control for an artifact it let in by key (src/delivery/representation.ts
-- KEYED_CACHE_CONTROL), which it sends as X-Artifact-Cache-Control with its X-Accel-Redirect:
-- its yes to the key. A signed URL's grant is public.
local KEYED_CACHE_CONTROL = "private, max-age=31536000, immutable"
-- The most request headers read; a request with more is left to the app.
local MAX_HEADERS = 100

local MAC_BYTES = 32
local mac = ffi.new("unsigned char[?]", MAC_BYTES)
local mac_length = ffi.new("unsigned int[1]")

local M = {}
M.KEYED_CACHE_CONTROL = KEYED_CACHE_CONTROL

-- The request's key headers as an HMAC (a binary string), or nil when it has none, repeats
-- one, or has more headers than are read.
local function key_identity()
  local headers, truncated = ngx.req.get_headers(MAX_HEADERS)
  if truncated then return nil end
  local authorization, api_key = headers["authorization"], headers["x-api-key"]
  if authorization == nil and api_key == nil then return nil end
  if type(authorization) == "table" or type(api_key) == "table" then return nil end
  -- Header values hold no NUL: the pair is read back unambiguously.
  local message = (authorization or "") .. "\0" .. (api_key or "")
  HMAC(EVP_sha256(), secret, SECRET_BYTES, message, #message, mac, mac_length)
  return ffi.string(mac, MAC_BYTES)
end

--- Whether the app said yes to this request's key headers less than VERDICT_SECONDS ago.
function M.remembered()
  local identity = key_identity()
  return identity ~= nil and ngx.shared.source_fetch_keys:get(identity) ~= nil
end

--- Remembers the app's yes to this request's key headers, when its answer (an X-Accel-Redirect
--- to the artifact) says it let the request in by key. Returns '' (called through set_by_lua).
function M.remember()
  if ngx.var.upstream_http_x_artifact_cache_control ~= KEYED_CACHE_CONTROL then return "" end
  local identity = key_identity()
  -- set, not add: a new yes starts a new period; a full dictionary forgets its oldest entries.
  if identity ~= nil then ngx.shared.source_fetch_keys:set(identity, true, VERDICT_SECONDS) end
  return ""
end

return M
