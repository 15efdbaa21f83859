-- The JSON access log's fields that carry bytes as the client sent them (the request line's URI,
-- User-Agent, Referer, Range), made valid UTF-8 for the log: every byte that is not part of a
-- well-formed UTF-8 sequence becomes U+FFFD. nginx's `escape=json` escapes quotes, backslashes and
-- control characters but copies bytes from 0x80 up as they are, so a single \xff from a client
-- would make its line invalid JSON, which GoAccess and other JSON readers drop.
--
-- nginx/templates/default.conf.template calls fields() from log_by_lua_block, which lua-nginx-module
-- runs before the access log is written; the log format then reads the variables set here.
local M = {}

local byte, find, sub = string.byte, string.find, string.sub
local concat = table.concat

local REPLACEMENT = "\239\191\189" -- U+FFFD in UTF-8

-- How many bytes the well-formed UTF-8 sequence starting at i of s has, or nil when there is none
-- (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF, nothing cut short).
local function sequence_at(s, i, len)
  local c = byte(s, i)
  if c < 0x80 then return 1 end
  local size, lo, hi
  if c >= 0xC2 and c <= 0xDF then size, lo, hi = 2, 0x80, 0xBF
  elseif c == 0xE0 then size, lo, hi = 3, 0xA0, 0xBF
  elseif c == 0xED then size, lo, hi = 3, 0x80, 0x9F
  elseif c >= 0xE1 and c <= 0xEF then size, lo, hi = 3, 0x80, 0xBF
  elseif c == 0xF0 then size, lo, hi = 4, 0x90, 0xBF
  elseif c == 0xF4 then size, lo, hi = 4, 0x80, 0x8F
  elseif c >= 0xF1 and c <= 0xF3 then size, lo, hi = 4, 0x80, 0xBF
  else return nil end
  if i + size - 1 > len then return nil end
  local second = byte(s, i + 1)
  if second < lo or second > hi then return nil end
  for k = i + 2, i + size - 1 do
    local continuation = byte(s, k)
    if continuation < 0x80 or continuation > 0xBF then return nil end
  end
  return size
end

-- s with every byte outside a well-formed UTF-8 sequence replaced by U+FFFD; "" for nil.
function M.valid_utf8(s)
  if s == nil then return "" end
  -- Most values are ASCII: nothing to look at.
  if not find(s, "[\128-\255]") then return s end
  local out, n = {}, 0
  local len, i, run = #s, 1, 1
  while i <= len do
    local size = sequence_at(s, i, len)
    if size then
      i = i + size
    else
      out[n + 1] = sub(s, run, i - 1)
      out[n + 2] = REPLACEMENT
      n = n + 2
      i = i + 1
      run = i
    end
  end
  out[n + 1] = sub(s, run)
  return concat(out)
end

-- Sets the log's variables for the client's fields from what the client sent.
function M.fields()
  local var = ngx.var
  local valid_utf8 = M.valid_utf8
  var.source_fetch_log_uri = valid_utf8(var.source_fetch_logged_uri)
  var.source_fetch_log_user_agent = valid_utf8(var.http_user_agent)
  var.source_fetch_log_referer = valid_utf8(var.http_referer)
  var.source_fetch_log_range = valid_utf8(var.http_range)
end

return M
