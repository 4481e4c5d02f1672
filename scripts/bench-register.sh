#!/usr/bin/env bash
# Registration cost against the number of hosted agents: starts a daemon in
# a scratch data directory (LAN off, loopback only, no port mapping),
# registers N agents through POST /agents over one keep-alive connection
# (python3's http.client: a process per request would dominate), and
# prints the mean cost of each block of 500. Figures: docs/performance.md.
#
#   scripts/bench-register.sh [N=3000]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-3000}
command -v python3 >/dev/null || { echo "python3 is not installed" >&2; exit 1; }
go build -o bin/agentd ./cmd/agentd
dir=$(mktemp -d)
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
bin/agentd run --data-dir "$dir" --api 127.0.0.1:0 --api-addr-file "$dir/api.addr" \
	--listen /ip4/127.0.0.1/tcp/0 --no-lan --no-port-mapping --log-level warn &
pid=$!
until [ -s "$dir/api.addr" ]; do
	kill -0 $pid 2>/dev/null || { echo "agentd did not start" >&2; exit 1; }
	sleep 0.1
done
python3 - "$(cat "$dir/api.addr")" "$n" <<'PY'
import http.client, json, sys, time, uuid
host, port = sys.argv[1].rsplit(":", 1)
n = int(sys.argv[2])
c = http.client.HTTPConnection(host, int(port))
last = time.time()
for i in range(n):
    body = {"agent_id": str(uuid.uuid4()), "agent_name": f"a{i}", "capabilities": {},
            "transport": {"type": "http", "endpoint": f"http://127.0.0.1:{9000 + i % 1000}"},
            "skills": [{"skill_id": f"s{i % 50}", "version": "1.0.0", "skill_type": "tool-skill",
                        "capabilities": [{"id": f"cap.{i % 200}", "version": "1.0.0"}]}]}
    c.request("POST", "/agents", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    b = r.read()
    if r.status not in (200, 201):
        sys.exit(f"registration {i}: HTTP {r.status}: {b[:200]!r}")
    if (i + 1) % 500 == 0:
        now = time.time()
        print(f"{i + 1:6d} hosted: {(now - last) / 500 * 1000:.2f} ms per registration (last 500)")
        last = now
PY
