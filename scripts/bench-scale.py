#!/usr/bin/env python3
"""agentd next to etcd at registry scale (make bench-scale; docs/performance.md).

For each N it starts an agentd daemon and an etcd server (Debian's
etcd-server) in scratch directories on this machine and measures, with one
keep-alive HTTP client per system unless said otherwise:

  register   N agents through POST /agents; the same signed records (the
             daemon's answers) stored in etcd with PUT /v3/kv/put under
             /agents/<id>, plus one key per capability /cap/<cap>/<id>
             (what a capability lookup reads), both in one transaction
             (one disk sync, as agentd's one per registration); the cost
             of the first and the last 1 000, and the total; and then
             1 000 more into the loaded daemon (etcd) and the first
             1 000 into a fresh one, alternating in blocks of 50, the
             idle one stopped with SIGSTOP: the same cost a minute or two
             apart moves by up to half on a shared machine, so the
             loaded store's cost is compared with a fresh one's from the
             same minutes as well; then, both stores loaded, 1 000 more
             into each, agentd and etcd alternating in blocks of 50: the
             two systems compared in the same minutes
  lookup     p50/p99 of a cached capability lookup (GET /agents?capability=)
             against an etcd prefix range over /cap/<cap>/
  search     p50/p99 of free-text queries (GET /agents?q=, two words);
             etcd has none
  memory     RSS after loading, minus RSS before, per record; its
             anonymous (heap) and file-backed (binary, mapped database
             files) parts; and after a restart
  restart    SIGTERM, start again, until GET /healthz (etcd: /health)
             answers 200; then until every hosted record is re-signed
  idle       CPU of each process over IDLE seconds without clients, and
             agentd's published heartbeats per 10 s window: with no
             peer, with one peer listening as soon as it has caught up,
             and again 4 minutes after it joined (DHT republishing)
  mixed      p99 of capability lookups while 4 clients register and 4
             run free-text queries
  unregister p50/p99 of DELETE /agents/{id} for 500 hosted agents, one
             client (etcd: one transaction deleting the record's keys)

Usage: scripts/bench-scale.py [--n 10000,100000] [--idle 60] [--skip-etcd]
"""

import argparse
import base64
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AGENTD = os.path.join(ROOT, "bin", "agentd")
CLK = os.sysconf("SC_CLK_TCK")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def rss_split_mb(pid):
    """The resident set's anonymous part (heap, stacks, allocators) and its
    file-backed part (the binary, memory-mapped database files)."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k = line.split(":")[0]
            if k in ("RssAnon", "RssFile", "RssShmem"):
                out[k] = int(line.split()[1]) / 1024
    return out.get("RssAnon", 0.0), out.get("RssFile", 0.0) + out.get("RssShmem", 0.0)


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / CLK


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))]


class Client:
    def __init__(self, addr):
        host, port = addr.rsplit(":", 1)
        self.c = http.client.HTTPConnection(host, int(port), timeout=120)

    def do(self, method, path, body=None):
        hdr = {}
        if body is not None:
            body = json.dumps(body) if not isinstance(body, (bytes, str)) else body
            hdr["Content-Type"] = "application/json"
        self.c.request(method, path, body, hdr)
        r = self.c.getresponse()
        data = r.read()
        return r.status, data


def wait_http(addr, path, deadline, proc):
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"process exited with {proc.returncode} before {path} answered")
        try:
            st, _ = Client(addr).do("GET", path)
            if st == 200:
                return True
        except OSError:
            pass
        time.sleep(0.005)
    return False


class Agentd:
    def __init__(self, d, extra=()):
        self.dir = d
        self.api = None
        self.proc = None
        self.extra = list(extra)

    def start(self):
        addr_file = os.path.join(self.dir, "api.addr")
        if os.path.exists(addr_file):
            os.remove(addr_file)
        self.api = self.api or f"127.0.0.1:{free_port()}"
        self.t0 = time.time()
        self.proc = subprocess.Popen(
            [AGENTD, "run", "--data-dir", os.path.join(self.dir, "data"), "--api", self.api,
             "--listen", "/ip4/127.0.0.1/tcp/0", "--no-lan", "--no-port-mapping", "--log-level", "warn"] + self.extra,
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.dir, "agentd.log"), "a"))
        if not wait_http(self.api, "/healthz", time.time() + 600, self.proc):
            raise SystemExit("agentd did not answer /healthz")
        return time.time() - self.t0

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=120)

    def metric(self, name, labels):
        _, body = Client(self.api).do("GET", "/metrics")
        total = 0.0
        for line in body.decode().splitlines():
            if (line.startswith(name + "{") or (not labels and line.startswith(name + " "))) and all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total


class Etcd:
    def __init__(self, d):
        self.dir = d
        self.api = f"127.0.0.1:{free_port()}"
        self.peer = f"127.0.0.1:{free_port()}"

    def start(self):
        t0 = time.time()
        self.proc = subprocess.Popen(
            ["etcd", "--name", "bench", "--data-dir", os.path.join(self.dir, "etcd"),
             "--listen-client-urls", f"http://{self.api}", "--advertise-client-urls", f"http://{self.api}",
             "--listen-peer-urls", f"http://{self.peer}", "--initial-advertise-peer-urls", f"http://{self.peer}",
             "--initial-cluster", f"bench=http://{self.peer}", "--quota-backend-bytes", str(8 << 30),
             "--log-level", "error", "--logger", "zap"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.dir, "etcd.log"), "a"))
        if not wait_http(self.api, "/health", time.time() + 120, self.proc):
            raise SystemExit("etcd did not answer /health")
        return time.time() - t0

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=120)


def b64(s):
    return base64.b64encode(s.encode() if isinstance(s, str) else s).decode()


def prefix_end(p):
    b = bytearray(p.encode())
    b[-1] += 1
    return bytes(b)


VOCAB = []


def vocab(rng):
    if not VOCAB:
        for _ in range(5000):
            VOCAB.append("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(4, 9))))
    return VOCAB


def agent_body(i, rng):
    v = vocab(rng)
    w = lambda: rng.choice(v)
    return {"agent_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)), "agent_name": f"{w()}-{w()}",
            "description": " ".join(w() for _ in range(6)), "tags": [w()], "capabilities": {},
            "transport": {"type": "http", "endpoint": f"http://127.0.0.1:{9000 + i % 1000}"},
            "skills": [{"skill_id": f"s{i % 50}", "version": "1.0.0", "skill_type": "tool-skill",
                        "capabilities": [{"id": f"cap.{i % 200}", "version": "1.0.0"}]}]}


def register_parallel(a, bodies, clients=4):
    """Registers bodies with clients keep-alive clients at once; returns
    the seconds it took."""
    t0 = time.time()
    th = [threading.Thread(target=register_agentd, args=(a, bodies[k::clients])) for k in range(clients)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    return time.time() - t0


def register_agentd(a, bodies, out=None, times=None):
    c = Client(a.api)
    for i, b in enumerate(bodies):
        t = time.perf_counter()
        st, data = c.do("POST", "/agents", b)
        if st not in (200, 201):
            raise SystemExit(f"registration {i}: HTTP {st}: {data[:200]!r}")
        if times is not None:
            times.append(time.perf_counter() - t)
        if out is not None:
            out.append(data)


def put_etcd(e, records, times=None):
    c = Client(e.api)
    for data in records:
        rec = json.loads(data)
        ag = rec.get("agent", rec)
        aid = ag["agent_id"]
        keys = [f"/agents/{aid}"] + [f"/cap/{cap['id']}/{aid}" for s in ag.get("skills", []) for cap in s.get("capabilities", [])]
        ops = [{"request_put": {"key": b64(k), "value": b64(data)}} for k in keys]
        t = time.perf_counter()
        st, body = c.do("POST", "/v3/kv/txn", {"success": ops})
        if st != 200:
            raise SystemExit(f"etcd txn: HTTP {st}: {body[:200]!r}")
        if times is not None:
            times.append(time.perf_counter() - t)


def lookups_agentd(a, n, rng, out):
    c = Client(a.api)
    for _ in range(n):
        t = time.perf_counter()
        st, _ = c.do("GET", f"/agents?capability=cap.{rng.randrange(200)}&limit=100")
        out.append(time.perf_counter() - t)
        assert st == 200, st


def lookups_etcd(e, n, rng, out):
    c = Client(e.api)
    for _ in range(n):
        p = f"/cap/cap.{rng.randrange(200)}/"
        t = time.perf_counter()
        st, _ = c.do("POST", "/v3/kv/range", {"key": b64(p), "range_end": b64(prefix_end(p)), "limit": 100})
        out.append(time.perf_counter() - t)
        assert st == 200, st


def searches(a, n, rng, out, stop=None):
    c = Client(a.api)
    v = vocab(rng)
    i = 0
    while (stop is None and i < n) or (stop is not None and not stop.is_set()):
        q = f"{rng.choice(v)}+{rng.choice(v)}" if i % 2 else rng.choice(v)
        t = time.perf_counter()
        st, _ = c.do("GET", f"/agents?q={q}&limit=20&local_only=true")
        out.append(time.perf_counter() - t)
        assert st in (200, 404), st
        i += 1


def ms(x):
    return f"{x * 1000:.2f} ms"


def interleaved(loaded, fresh, store, lbodies, fbodies, block=50):
    """The mean cost of storing lbodies into loaded and fbodies into fresh
    (a fresh daemon or etcd, started here and stopped), in alternating
    blocks of block, the other process stopped (SIGSTOP) meanwhile: both
    means come from the same minutes, so the machine's drift, which moves
    the same cost by up to half within minutes, cancels out of their
    ratio."""
    fresh.start()
    try:
        return alternate(loaded, fresh, store, store, lbodies, fbodies, block)
    finally:
        fresh.stop()


def alternate(x, y, store_x, store_y, bx, by, block=50):
    """The mean cost of storing bx into x and by into y (both running),
    in alternating blocks of block, the other process stopped (SIGSTOP)
    meanwhile: agentd against etcd in the same minutes."""
    xt, yt = [], []
    try:
        for i in range(0, len(bx), block):
            y.proc.send_signal(signal.SIGSTOP)
            x.proc.send_signal(signal.SIGCONT)
            store_x(x, bx[i:i + block], xt)
            x.proc.send_signal(signal.SIGSTOP)
            y.proc.send_signal(signal.SIGCONT)
            store_y(y, by[i:i + block], yt)
    finally:
        x.proc.send_signal(signal.SIGCONT)
        y.proc.send_signal(signal.SIGCONT)
    return statistics.mean(xt), statistics.mean(yt)


def renamed(recs, rng):
    """recs (signed records) under new agent ids: etcd stores bytes, so
    records of the same shape and size do for its control."""
    out = []
    for data in recs:
        aid = json.loads(data).get("agent", {}).get("agent_id")
        new = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        out.append(data.replace(aid.encode(), new.encode()))
    return out


IL_ROW = "register 1 000 more: into the loaded store / into a fresh one, interleaved in blocks of 50"
AB_ROW = "register 1 000 more into each loaded store, agentd and etcd interleaved in blocks of 50"


def bench(n, idle, skip_etcd):
    rng = random.Random(n)
    d = tempfile.mkdtemp(prefix="agentd-bench-scale-")
    rows = []
    row = lambda k, a, e="—": rows.append((k, a, e)) or print(f"  {k}: agentd {a} | etcd {e}", flush=True)
    try:
        a = Agentd(d)
        a.start()
        base_a = rss_mb(a.proc.pid)
        bodies = [agent_body(i, rng) for i in range(n)]
        recs, times = [], []
        t0 = time.time()
        register_agentd(a, bodies, recs, times)
        reg_a = time.time() - t0
        first, last = statistics.mean(times[:1000]), statistics.mean(times[-1000:])
        fd = os.path.join(d, "fresh")
        os.makedirs(fd)
        il, ifr = interleaved(a, Agentd(fd), lambda f, b, t: register_agentd(f, b, None, t),
                              [agent_body(n + 8000 + i, rng) for i in range(1000)],
                              [agent_body(n + 10000 + i, rng) for i in range(1000)])
        e = None
        if not skip_etcd:
            e = Etcd(d)
            e.start()
            base_e = rss_mb(e.proc.pid)
            etimes = []
            t0 = time.time()
            put_etcd(e, recs, etimes)
            reg_e = time.time() - t0
            efirst, elast = statistics.mean(etimes[:1000]), statistics.mean(etimes[-1000:])
            fe = os.path.join(d, "fresh-etcd")
            os.makedirs(fe)
            el, efr = interleaved(e, Etcd(fe), put_etcd, renamed(recs[-1000:], rng), renamed(recs[-1000:], rng))
            # The two loaded stores against each other in the same
            # minutes: the figure "register all" cannot give, minutes
            # apart on a machine that drifts.
            aa, ae = alternate(a, e, lambda f, b, t: register_agentd(f, b, None, t), put_etcd,
                               [agent_body(n + 12000 + i, rng) for i in range(1000)],
                               renamed(recs[:1000], rng))
            row("register all, 1 client", f"{reg_a:.1f} s", f"{reg_e:.1f} s")
            row(AB_ROW, f"{ms(aa)} (×{aa / ae:.2f} etcd's)", ms(ae))
            row("register, first / last 1 000", f"{ms(first)} / {ms(last)} (×{last / first:.2f})",
                f"{ms(efirst)} / {ms(elast)} (×{elast / efirst:.2f})")
            row(IL_ROW, f"{ms(il)} / {ms(ifr)} (×{il / ifr:.2f})", f"{ms(el)} / {ms(efr)} (×{el / efr:.2f})")
        else:
            row("register all, 1 client", f"{reg_a:.1f} s")
            row("register, first / last 1 000", f"{ms(first)} / {ms(last)} (×{last / first:.2f})")
            row(IL_ROW, f"{ms(il)} / {ms(ifr)} (×{il / ifr:.2f})")
        # Bulk with 4 clients each.
        more = [agent_body(n + i, rng) for i in range(4000)]
        bulk_a = 4000 / register_parallel(a, more)
        bulk_e = "—"
        if e:
            recs2 = []
            c = Client(a.api)
            for b in more:
                st, data = c.do("GET", f"/agents/{b['agent_id']}")
                recs2.append(data)
            t0 = time.time()
            th = [threading.Thread(target=put_etcd, args=(e, recs2[k::4])) for k in range(4)]
            [t.start() for t in th]
            [t.join() for t in th]
            bulk_e = f"{4000 / (time.time() - t0):.0f} records/s"
        row("register 4 000 more, 4 clients", f"{bulk_a:.0f} records/s", bulk_e)
        total = n + 4000
        # Lookups.
        la, le = [], []
        lookups_agentd(a, 2000, rng, la)
        if e:
            lookups_etcd(e, 2000, rng, le)
        row("capability lookup p50 / p99", f"{ms(pct(la, 50))} / {ms(pct(la, 99))}",
            f"{ms(pct(le, 50))} / {ms(pct(le, 99))}" if e else "—")
        sa = []
        searches(a, 2000, rng, sa)
        row("free-text search p50 / p99", f"{ms(pct(sa, 50))} / {ms(pct(sa, 99))}")
        # Memory.
        ra = rss_mb(a.proc.pid)
        re_ = rss_mb(e.proc.pid) if e else 0
        row("RSS loaded (per record)", f"{ra:.0f} MB ({(ra - base_a) * 1024 * 1024 / total:.0f} B)",
            f"{re_:.0f} MB ({(re_ - base_e) * 1024 * 1024 / total:.0f} B)" if e else "—")
        split = lambda pid: "%.0f MB / %.0f MB" % rss_split_mb(pid)
        row("RSS loaded: anonymous / file-backed", split(a.proc.pid), split(e.proc.pid) if e else "—")
        # Mixed load.
        stop = threading.Event()
        mixed_l, extra = [], [agent_body(n + 4000 + i, rng) for i in range(2000)]
        def reg_loop(k):
            register_agentd(a, extra[k::4])
        bg = [threading.Thread(target=reg_loop, args=(k,)) for k in range(4)]
        bg += [threading.Thread(target=searches, args=(a, 0, random.Random(k), [], stop)) for k in range(4)]
        [t.start() for t in bg]
        lookups_agentd(a, 1000, rng, mixed_l)
        stop.set()
        [t.join() for t in bg]
        total += 2000
        row("lookup p50 / p99 under 4 registering + 4 searching clients",
            f"{ms(pct(mixed_l, 50))} / {ms(pct(mixed_l, 99))}")
        # Unregistration: 500 of the agents registered by four clients.
        gone = [b["agent_id"] for b in more[:500]]
        ua, ue = [], []
        c = Client(a.api)
        for aid in gone:
            t = time.perf_counter()
            st, body = c.do("DELETE", f"/agents/{aid}")
            ua.append(time.perf_counter() - t)
            if st >= 300:
                raise SystemExit(f"agentd unregister: HTTP {st}: {body[:200]!r}")
        if e:
            ce = Client(e.api)
            for b in more[:500]:
                aid = b["agent_id"]
                keys = [f"/agents/{aid}"] + [f"/cap/{cap['id']}/{aid}" for s in b["skills"] for cap in s["capabilities"]]
                t = time.perf_counter()
                st, body = ce.do("POST", "/v3/kv/txn", {"success": [{"request_delete_range": {"key": b64(k)}} for k in keys]})
                ue.append(time.perf_counter() - t)
                if st != 200:
                    raise SystemExit(f"etcd delete txn: HTTP {st}: {body[:200]!r}")
        total -= 500
        row("unregister 500, 1 client, p50 / p99", f"{ms(pct(ua, 50))} / {ms(pct(ua, 99))}",
            f"{ms(pct(ue, 50))} / {ms(pct(ue, 99))}" if e else "—")
        # Idle CPU and heartbeat pacing: alone (no peer listens, so no
        # heartbeat is worth sending), then with one peer that hears the
        # whole network (--scope full).
        def idle_cpu(label):
            c0, t0 = cpu_s(a.proc.pid), time.time()
            e0 = cpu_s(e.proc.pid) if e else 0
            beats = []
            # Heartbeats sent: alone, and inside heartbeat batches.
            def sent():
                return (a.metric("agentd_gossip_published_total", {"type": "heartbeat"})
                        + a.metric("agentd_gossip_batched_beats_total", {}))
            prev = sent()
            while time.time() < t0 + idle:
                time.sleep(10)
                cur = sent()
                beats.append(cur - prev)
                prev = cur
            el = time.time() - t0
            idle_a = (cpu_s(a.proc.pid) - c0) / el * 100
            idle_e = (cpu_s(e.proc.pid) - e0) / el * 100 if e else 0
            row(f"idle CPU over {el:.0f} s, {label}", f"{idle_a:.2f} % of a core", f"{idle_e:.2f} %" if e else "—")
            mean = statistics.mean(beats)
            dev = f" (largest deviation {max(abs(b - mean) for b in beats) / mean * 100:.0f} %)" if mean else ""
            row(f"heartbeats per 10 s window, {label} (min / mean / max)", f"{min(beats):.0f} / {mean:.0f} / {max(beats):.0f}{dev}")
        idle_cpu("no peer")
        _, body = Client(a.api).do("GET", "/healthz")
        addr = next(x for x in json.loads(body)["listen"] if x.startswith("/ip4/127.0.0.1/tcp/"))
        pd = os.path.join(d, "peer")
        os.makedirs(pd)
        peer = Agentd(pd, ["--scope", "full", "--bootstrap", addr])
        peer.start()
        t_peer = time.time()
        t0, last, seen = time.time(), -1, 0
        while time.time() - t0 < 600:
            _, body = Client(peer.api).do("GET", "/healthz")
            seen = json.loads(body)["live_agents"]
            if seen >= total or (seen == last and time.time() - t0 > 20):
                break
            last = seen
            time.sleep(10)
        row("a peer joining (--scope full) hears", f"{seen} agents after {time.time() - t0:.0f} s")
        idle_cpu("one peer listening")
        # Steady state with the peer: the first window above may end before
        # the DHT loop's first republish round with a peer to put to (the
        # puts that found nobody are retried within the reprovide interval,
        # 3 min), so measure again once the peer has listened for 4 min,
        # with the value puts made meanwhile.
        time.sleep(max(0.0, t_peer + 240 - time.time()))
        p0 = a.metric("agentd_dht_value_puts_total", {})
        pt0 = time.time()
        idle_cpu("one peer listening, 4 min on")
        row("DHT value puts, 4 min on", f"{(a.metric('agentd_dht_value_puts_total', {}) - p0) / (time.time() - pt0):.1f} /s")
        peer.stop()
        # Restart.
        a.stop()
        ta = a.start()
        tr0 = time.time()
        ra2 = rss_mb(a.proc.pid)
        te = "—"
        if e:
            e.stop()
            te = f"{e.start():.2f} s"
        row("restart until /healthz (etcd /health) answers", f"{ta:.2f} s", te)
        c = Client(a.api)
        st, _ = c.do("GET", "/agents?capability=cap.7&limit=1")
        row("first lookup after restart", f"HTTP {st}")
        # Re-signing runs in the hosted agents' heartbeat slots: measure
        # its rate over 30 s and say when it ends.
        def resigning():
            st, body = c.do("GET", "/healthz")
            return json.loads(body)["resigning"]
        r0, t0 = resigning(), time.time()
        time.sleep(30)
        r1, el = resigning(), time.time() - t0
        rate = (r0 - r1) / el
        left = f", all within ~{r1 / rate:.0f} s more" if rate > 0 and r1 else ""
        row("restart: re-signed in the background", f"{r0 - r1} in {el:.0f} s ({rate:.0f}/s){left}; {r1} waiting")
        row("RSS after restart", f"{rss_mb(a.proc.pid):.0f} MB", f"{rss_mb(e.proc.pid):.0f} MB" if e else "—")
        a.stop()
        if e:
            e.stop()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", default="10000,100000")
    ap.add_argument("--idle", type=int, default=60)
    ap.add_argument("--skip-etcd", action="store_true")
    args = ap.parse_args()
    if not os.path.exists(AGENTD):
        raise SystemExit("build bin/agentd first (make build)")
    skip = args.skip_etcd
    if not skip and not shutil.which("etcd"):
        raise SystemExit("etcd is not installed (apt-get install etcd-server), or pass --skip-etcd")
    try:
        sizes = [int(x) for x in args.n.split(",")]
    except ValueError:
        raise SystemExit(f"--n takes record counts separated by commas, got {args.n!r}")
    if any(n < 1000 for n in sizes):
        raise SystemExit(f"--n: each count must be at least 1000 (the first and last thousand are compared), got {args.n!r}")
    for n in sizes:
        print(f"## {n} records", flush=True)
        rows = bench(n, args.idle, skip)
        print()
        print(f"| {n} records | agentd | etcd |")
        print("|---|---|---|")
        for k, av, ev in rows:
            print(f"| {k} | {av} | {ev} |")
        print(flush=True)


if __name__ == "__main__":
    main()
