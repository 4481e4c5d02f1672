#!/usr/bin/env bash
# Cached-discover throughput of a running agentd, measured with wrk
# (Debian: apt-get install wrk). It starts a daemon in a scratch data
# directory (LAN off, loopback only), registers N agents through
# POST /agents (three of cap-0 … cap-149 each, one skill), then runs wrk
# against GET /agents?capability=cap-<i>, cycling over the 150
# capabilities, with 1, 8 and 16 connections. Figures: docs/performance.md.
#
#   scripts/bench-api-wrk.sh [N=1000] [DURATION=20s]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000}
dur=${2:-20s}
api=127.0.0.1:4798
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 1; }
command -v curl >/dev/null || { echo "curl is not installed" >&2; exit 1; }
go build -o bin/agentd ./cmd/agentd
dir=$(mktemp -d)
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
bin/agentd run --data-dir "$dir" --api "$api" --listen /ip4/127.0.0.1/tcp/0 --no-lan --log-level warn \
	--api-addr-file "$dir/api.addr" &
pid=$!
until [ -s "$dir/api.addr" ]; do
	kill -0 $pid 2>/dev/null || { echo "agentd did not start (is $api in use?)" >&2; exit 1; }
	sleep 0.1
done
echo "registering $n agents…"
for i in $(seq 0 $((n - 1))); do
	id=$(cat /proc/sys/kernel/random/uuid)
	c1=$((i % 150)); c2=$(((i * 7 + 3) % 150)); c3=$(((i * 13 + 5) % 150))
	[ $c2 -eq $c1 ] && c2=$(((c2 + 1) % 150))
	[ $c3 -eq $c1 ] || [ $c3 -eq $c2 ] && c3=$(((c3 + 2) % 150))
	curl -sf -o /dev/null -H 'Content-Type: application/json' "http://$api/agents" -d @- <<JSON
{"protocol_version":"v1.0","agent":{"agent_id":"$id","agent_name":"bench-$i","capabilities":{},
"transport":{"type":"http","endpoint":"http://10.0.0.1:$((8000 + i % 1000))"},"tags":["bench"],
"skills":[{"skill_id":"skill-$i","version":"1.0.0","skill_type":"tool-skill","scenes":["bench"],
"capabilities":[{"id":"cap-$c1"},{"id":"cap-$c2"},{"id":"cap-$c3"}]}]}}
JSON
done
cat > "$dir/caps.lua" <<'LUA'
local i = 0
request = function()
  i = (i + 1) % 150
  return wrk.format("GET", "/agents?capability=cap-" .. i)
end
LUA
for c in 1 8 16; do
	t=$((c < 2 ? 1 : 2))
	echo "== wrk -t$t -c$c -d$dur"
	wrk -t"$t" -c"$c" -d"$dur" --latency -s "$dir/caps.lua" "http://$api"
done
