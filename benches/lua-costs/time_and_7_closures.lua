-- Probe (not a limiter): time_only.lua plus seven local functions, as many closures as
-- prelude.lua and gcra.lua create on every run.
local function a(x) return x end
local function b(x) return x end
local function c(x) return x end
local function d(x) return x end
local function e(x) return x end
local function f(x) return x end
local function g(x) return x end
local t = redis.call('TIME')
return 1
