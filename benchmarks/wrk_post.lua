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
