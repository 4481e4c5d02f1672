#!/usr/bin/env python3
"""Where a registry's memory goes: register N agents, then read the heap.

  scripts/record-heap.py BIN N [OUT]

Starts BIN (agentd) in a scratch directory with AGENTD_PPROF on
127.0.0.1:6061, registers N agents with four keep-alive clients (the
records of make bench-scale, scripts/bench-scale.py), waits 15 s, and
prints the process's resident memory (VmRSS, RssAnon, RssFile) and the Go
runtime's figures (runtime.MemStats) after a forced collection: the live
heap (HeapAlloc), its objects, what the runtime holds beside it. With OUT
it keeps the heap profile (go tool pprof -sample_index=inuse_space OUT).
docs/performance.md, "Fewer bytes per held record", has its figures.
"""
import importlib.util
import os
import re
import shutil
import sys
import tempfile
import time
import urllib.request
import random

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("bs", os.path.join(here, "bench-scale.py"))
bs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bs)

PPROF = "127.0.0.1:6061"


def status(pid, prefix=""):
    st = open(f"/proc/{pid}/status").read()
    for k in ("VmRSS", "RssAnon", "RssFile"):
        print(prefix + re.search(k + r":\s+(\d+ kB)", st).group(0))


def main():
    if len(sys.argv) not in (3, 4):
        raise SystemExit(__doc__)
    bs.AGENTD, n = sys.argv[1], int(sys.argv[2])
    out = sys.argv[3] if len(sys.argv) == 4 else None
    os.environ["AGENTD_PPROF"] = PPROF
    d = tempfile.mkdtemp(prefix="record-heap-")
    a = bs.Agentd(d)
    a.start()
    try:
        rng = random.Random(n)
        bodies = [bs.agent_body(i, rng) for i in range(n)]
        print(f"{n} registered in {bs.register_parallel(a, bodies):.1f} s", flush=True)
        time.sleep(15)
        status(a.proc.pid)
        heap = urllib.request.urlopen(f"http://{PPROF}/debug/pprof/heap?gc=1").read()
        if out:
            open(out, "wb").write(heap)
        txt = urllib.request.urlopen(f"http://{PPROF}/debug/pprof/heap?debug=1").read().decode()
        for k in ("HeapAlloc", "HeapInuse", "HeapIdle", "HeapReleased", "HeapObjects", "Stack", "Sys"):
            for line in txt.splitlines():
                if line.startswith("# " + k + " "):
                    print(line)
        status(a.proc.pid, "after the collection: ")
    finally:
        a.stop()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
