-- POST the file named by BODY_FILE with CONTENT_TYPE (and ACCEPT) on every request.
local file = io.open(os.getenv("BODY_FILE"), "rb")
wrk.method = "POST"
wrk.body = file:read("*all")
file:close()
wrk.headers["Content-Type"] = os.getenv("CONTENT_TYPE")
wrk.headers["Accept"] = os.getenv("ACCEPT") or "application/json"
if os.getenv("HEADER_LENGTH") then
  wrk.headers["Inference-Header-Content-Length"] = os.getenv("HEADER_LENGTH")
end
-- CLIENT_IDS=n: every request names its n rows with fresh prediction ids (the Prediction-Ids header):
-- a counter's (<start>-<random>.<request>.<row>, in the order they are served), or with RANDOM_IDS=1
-- random ones in the form of a UUID (what a service's request ids often are)
local rows = tonumber(os.getenv("CLIENT_IDS") or "")
local random_ids = os.getenv("RANDOM_IDS") == "1"
if rows then
  local counter = 0
  local prefix = tostring(os.time()) .. "-" .. tostring(math.random(1, 1000000000))
  math.randomseed(os.time())
  local function uuid()
    return string.format("%08x-%04x-4%03x-%04x-%06x%06x", math.random(0, 0xffffffff), math.random(0, 0xffff),
                         math.random(0, 0xfff), math.random(0x8000, 0xbfff), math.random(0, 0xffffff),
                         math.random(0, 0xffffff))
  end
  request = function()
    counter = counter + 1
    local ids = {}
    for i = 0, rows - 1 do
      ids[#ids + 1] = random_ids and uuid() or (prefix .. "." .. counter .. "." .. i)
    end
    wrk.headers["Prediction-Ids"] = table.concat(ids, ",")
    return wrk.format()
  end
end
