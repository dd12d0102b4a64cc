-- Mixed traffic for benchmarks/load_test.py: 90% calibrate, 9% report, 1% fit, each request
-- a body chosen at random from BODY_DIR/<kind>_<i>.json (i < BODIES). done() prints one JSON line.
local dir = os.getenv("BODY_DIR")
local count = tonumber(os.getenv("BODIES"))
local kinds = {
  {name = "calibrate", upto = 90, path = "/v1/calibrators/load@production/calibrate"},
  {name = "report", upto = 99, path = "/v1/calibrators/load@production/report"},
  {name = "fit", upto = 100, path = "/v1/calibrators/load-fits/versions"},
}
local bodies = {}
local headers = {["Content-Type"] = "application/json"}

function init(args)
  math.randomseed(tonumber(os.getenv("SEED") or "1"))
  for _, kind in ipairs(kinds) do
    bodies[kind.name] = {}
    for i = 0, count - 1 do
      local file = io.open(dir .. "/" .. kind.name .. "_" .. i .. ".json", "rb")
      bodies[kind.name][i + 1] = file:read("*all")
      file:close()
    end
  end
end

function request()
  local draw = math.random(100)
  for _, kind in ipairs(kinds) do
    if draw <= kind.upto then
      return wrk.format("POST", kind.path, headers, bodies[kind.name][math.random(count)])
    end
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('RESULT {"requests": %d, "duration_us": %d, "non_2xx": %d, "connect": %d, "read": %d, '
    .. '"write": %d, "timeout": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, "p999_us": %d, "max_us": %d}\n',
    summary.requests, summary.duration, e.status, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9), latency.max))
end
