-- wrk script: the load generator's mix of AdmissionReviews (refusals, warnings, patches, plain
-- allows), one after another on each keep-alive connection. FIXTURES names their directory:
-- `loadgen --write-mix DIR` writes them as the API server sends them, or the test fixtures.
--   FIXTURES=target/loadtest-mix wrk -t1 -c16 -d10s -s webhook/examples/wrk-mix.lua https://127.0.0.1:18443
local dir = os.getenv("FIXTURES") or "webhook/tests/fixtures"
local mix = {
  {"/validate", "isvc-create-deployment-strategy.json"},
  {"/validate", "isvc-create-zero-budget.json"},
  {"/validate", "isvc-update-bad-cooldown.json"},
  {"/validate", "runtime-zero-budgets.json"},
  {"/mutate", "irep-create-type-only.json"},
  {"/validate", "irep-create-type-only.json"},
}
local requests = {}
for i, m in ipairs(mix) do
  local f = assert(io.open(dir .. "/" .. m[2], "rb"))
  local body = f:read("*a")
  f:close()
  requests[i] = wrk.format("POST", m[1], {["Content-Type"] = "application/json"}, body)
end
local n = 0
function request()
  n = n + 1
  return requests[(n % #requests) + 1]
end
