#!/usr/bin/env python3
"""Restarts of one data directory by several agentd binaries, alternating
(docs/performance.md, "A start without reflection or copies").

A restart's time on a shared machine moves by a fifth from one minute to
the next, so binaries are compared in the same minutes, in turn: each run
starts the binary on DIR, waits until GET /healthz answers (the time
printed), reads the process's CPU time (user + system, all threads) at
that moment and its peak RSS two seconds later, and stops it with SIGTERM.

  --make N   first fill DIR with N registrations (bench-scale.py's bodies,
             four clients) using the first binary, unless DIR exists

Usage: scripts/restart-ab.py DIR BIN[,BIN...] [--runs K] [--make N]
"""

import argparse
import importlib.util
import os
import random
import re
import statistics
import time

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("bench_scale", os.path.join(HERE, "bench-scale.py"))
bs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bs)


def fill(d, n, binary):
    os.makedirs(d)
    bs.AGENTD = binary
    a = bs.Agentd(d)
    a.start()
    rng = random.Random(n)
    bodies = [bs.agent_body(i, rng) for i in range(n)]
    print(f"registered {n} in {bs.register_parallel(a, bodies):.1f} s", flush=True)
    a.stop()


def run(d, binary):
    bs.AGENTD = binary
    a = bs.Agentd(d)
    wall = a.start()
    stat = open(f"/proc/{a.proc.pid}/stat").read().rsplit(")", 1)[1].split()
    cpu = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
    time.sleep(2)
    status = open(f"/proc/{a.proc.pid}/status").read()
    hwm = int(re.search(r"VmHWM:\s+(\d+)", status).group(1)) // 1024
    a.stop()
    return wall, cpu, hwm


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("binaries")
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--make", type=int, default=0)
    args = ap.parse_args()
    bins = args.binaries.split(",")
    if args.make and not os.path.exists(args.dir):
        fill(args.dir, args.make, bins[0])
    res = {b: [] for b in bins}
    for _ in range(args.runs):
        for b in bins:
            wall, cpu, hwm = run(args.dir, b)
            res[b].append((wall, cpu, hwm))
            print(f"{b}: {wall:.2f} s to /healthz, {cpu:.2f} CPU-s, peak RSS {hwm} MB", flush=True)
    for b in bins:
        w, c, h = zip(*res[b])
        print(f"{b}: median {statistics.median(w):.2f} s ({min(w):.2f}-{max(w):.2f}), "
              f"{statistics.median(c):.2f} CPU-s ({min(c):.2f}-{max(c):.2f}), peak RSS {statistics.median(h):.0f} MB")


if __name__ == "__main__":
    main()
