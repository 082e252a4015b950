-- Pilots asking fairmatch for jobs: POST <path> with resource descriptions
-- read from a file (one JSON object a line), taken round-robin, each thread
-- starting at its own offset so that threads do not send the same sequence.
--
-- wrk -t T -c C -d Ds -s bench/pilots.lua URL -- PATH FILE THREADS [DELAY_MS [LIFE RUN]]
--
-- With LIFE > 0 each description stands for a pilot that sends a PilotReference
-- of its own (unique per run, thread and description), and a new one after LIFE
-- requests, as a pilot's life ends and another takes its slot; LIFE 0 sends none.
--
-- wrk runs one Lua state per thread, and done() runs in yet another one: the
-- per-thread counters are reached through the thread objects kept in setup().
-- done() prints one JSON line (the last line of stdout).

local threads = {}

function setup(thread)
   table.insert(threads, thread)
   thread:set("id", #threads - 1)
end

local requests = {}
local bodies = {}
local uses = {}
local next_index = 1
local mean_delay_ms = 0
local life = 0
local run_tag = "run"
local match_path = ""
local headers = { ["Content-Type"] = "application/json" }
statuses = {}  -- global: read by done() through thread:get

function init(args)
   local path, file, nthreads = args[1], args[2], tonumber(args[3])
   mean_delay_ms = tonumber(args[4] or "0")
   life = tonumber(args[5] or "0")
   run_tag = args[6] or run_tag
   match_path = path
   for line in io.lines(file) do
      if line:find("%S") then
         table.insert(requests, wrk.format("POST", path, headers, line))
         table.insert(bodies, (line:gsub("%s*}%s*$", "")))
      end
   end
   if #requests == 0 then
      error("no resource descriptions in " .. file)
   end
   next_index = math.floor(id * #requests / nthreads) % #requests + 1
   math.randomseed(1000 + id)
   if mean_delay_ms > 0 then
      -- Open loop (approximately): a uniform jitter around the mean keeps
      -- connections from firing in lock-step.
      function delay()
         return mean_delay_ms * (0.5 + math.random())
      end
   end
end

function request()
   local i = next_index
   next_index = next_index % #requests + 1
   if life <= 0 then
      return requests[i]
   end
   local n = uses[i] or 0
   uses[i] = n + 1
   local reference = string.format("https://bench-ce.example.org:9619/%s.%d.%d.%d", run_tag, id, i,
                                   math.floor(n / life))
   return wrk.format("POST", match_path, headers, bodies[i] .. ',"PilotReference":"' .. reference .. '"}')
end

function response(status, headers, body)
   local key = tostring(status)
   statuses[key] = (statuses[key] or 0) + 1
end

local function json(value)
   local kind = type(value)
   if kind == "table" then
      local parts = {}
      if #value > 0 then
         for _, v in ipairs(value) do table.insert(parts, json(v)) end
         return "[" .. table.concat(parts, ",") .. "]"
      end
      local keys = {}
      for k in pairs(value) do table.insert(keys, k) end
      table.sort(keys)
      for _, k in ipairs(keys) do
         table.insert(parts, string.format("%q:%s", k, json(value[k])))
      end
      return "{" .. table.concat(parts, ",") .. "}"
   elseif kind == "number" then
      if value == math.floor(value) and math.abs(value) < 2^53 then
         return string.format("%d", value)
      end
      return string.format("%.4f", value)
   end
   return string.format("%q", tostring(value))
end

local function ms(us)
   return us / 1000
end

-- 0.1, 0.5, 1 ... 99, 99.1 ... 99.9, 99.95, 99.99: 112 points for a CDF plot.
local function cdf_points()
   local points = { 0.1, 0.5 }
   for p = 1, 99 do table.insert(points, p) end
   for i = 1, 9 do table.insert(points, 99 + i / 10) end
   table.insert(points, 99.95)
   table.insert(points, 99.99)
   return points
end

function done(summary, latency, _)
   local by_status, counts = {}, { ["200"] = 0, ["204"] = 0, other = 0 }
   for _, thread in ipairs(threads) do
      for status, n in pairs(thread:get("statuses") or {}) do
         by_status[status] = (by_status[status] or 0) + n
         local key = (status == "200" or status == "204") and status or "other"
         counts[key] = counts[key] + n
      end
   end
   local duration_s = summary.duration / 1e6
   local cdf = {}
   for _, p in ipairs(cdf_points()) do
      table.insert(cdf, { p, ms(latency:percentile(p)) })
   end
   local result = {
      requests = summary.requests,
      duration_s = duration_s,
      rps = summary.requests / duration_s,
      status = counts,
      by_status = by_status,
      errors = summary.errors,
      latency_ms = {
         mean = ms(latency.mean),
         p50 = ms(latency:percentile(50)),
         p90 = ms(latency:percentile(90)),
         p99 = ms(latency:percentile(99)),
         ["p99.9"] = ms(latency:percentile(99.9)),
         max = ms(latency.max),
      },
      cdf_ms = cdf,
   }
   io.write(json(result) .. "\n")
end
