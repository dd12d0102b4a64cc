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
-- CLIENT_IDS=n: every request names its n rows with fresh prediction ids (the Prediction-Ids header)
local rows = tonumber(os.getenv("CLIENT_IDS") or "")
if rows then
  local counter = 0
  local prefix = tostring(os.time()) .. "-" .. tostring(math.random(1, 1000000000))
  request = function()
    counter = counter + 1
    local ids = {}
    for i = 0, rows - 1 do
      ids[#ids + 1] = prefix .. "." .. counter .. "." .. i
    end
    wrk.headers["Prediction-Ids"] = table.concat(ids, ",")
    return wrk.format()
  end
end
