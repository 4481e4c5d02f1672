package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/client"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
)

// TestBootstrapLoad measures what a bootstrap node costs per peer: the
// real `agentd bootstrap` process on loopback, AGENTD_BOOTSTRAP_PEERS
// libp2p hosts (in this process) that connect to it, identify, and hold a
// circuit relay v2 reservation each, as agents behind NAT do. It reports the
// node's RSS, goroutines and idle CPU (its own /metrics) before and after.
// `make bootstrap-load` runs it at 250, 500 and 1000 peers; docs/bootstrap.md
// has the figures. Without the variable it is skipped (make test stays
// fast).
func TestBootstrapLoad(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("AGENTD_BOOTSTRAP_PEERS"))
	if n <= 0 {
		t.Skip("set AGENTD_BOOTSTRAP_PEERS (make bootstrap-load) to measure a bootstrap node under load")
	}
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "boot.yaml")
	// All load peers come from 127.0.0.1: lift the per-IP relay limit.
	if err := os.WriteFile(cfgFile, []byte(fmt.Sprintf("nat:\n  relay:\n    maxReservations: %d\n    maxReservationsPerIP: %d\n", 2*n, 2*n)), 0o600); err != nil {
		t.Fatal(err)
	}
	addrFile := filepath.Join(dir, "api.addr")
	out := &syncBuf{}
	cmd := exec.Command(agentdBin, "bootstrap", "--config", cfgFile, "--data-dir", filepath.Join(dir, "data"),
		"--listen", "/ip4/127.0.0.1/tcp/0", "--api", "127.0.0.1:0", "--api-addr-file", addrFile, "--no-port-mapping", "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var api string
	var boot *peer.AddrInfo
	eventually(t, 20*time.Second, "the bootstrap node", func() bool {
		b, err := os.ReadFile(addrFile)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		api = strings.TrimSpace(string(b))
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.HasPrefix(l, "/ip4/127.0.0.1/tcp/") {
				boot, err = peer.AddrInfoFromString(strings.TrimSpace(l))
				return err == nil
			}
		}
		return false
	})
	sample := func(label string) (rssMB, cpu float64, goroutines int) {
		rssMB = rss(t, cmd.Process.Pid)
		m := scrape(t, "http://"+api+"/metrics")
		cpu, goroutines = m["process_cpu_seconds_total"], int(m["go_goroutines"])
		t.Logf("%s: RSS %.1f MB, %d goroutines, CPU %.2f s", label, rssMB, goroutines, cpu)
		return
	}
	idle := func(label string) (rssMB, cpuPerSec float64, g int) {
		_, c0, _ := sample(label + " (idle start)")
		select { // a measurement window, not a wait for an event
		case <-time.After(30 * time.Second):
		case <-t.Context().Done():
		}
		r, c1, g := sample(label + " (idle end)")
		return r, (c1 - c0) / 30, g
	}
	rss0, cpu0, g0 := idle("no peer")

	hosts := make([]host.Host, n)
	var reserved atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	start := time.Now()
	for i := range hosts {
		h, err := libp2p.New(libp2p.NoListenAddrs, libp2p.Transport(tcp.NewTCPTransport), libp2p.DisableMetrics(),
			libp2p.ResourceManager(&network.NullResourceManager{}))
		if err != nil {
			t.Fatal(err)
		}
		hosts[i] = h
		t.Cleanup(func() { _ = h.Close() })
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := h.Connect(ctx, *boot); err != nil {
				t.Errorf("connect: %v", err)
				return
			}
			if _, err := client.Reserve(ctx, h, *boot); err != nil {
				t.Errorf("reserve: %v", err)
				return
			}
			reserved.Add(1)
		})
	}
	wg.Wait()
	t.Logf("%d peers connected and reserved in %s", reserved.Load(), time.Since(start).Round(time.Millisecond))
	// Past the connection manager's grace period (1 min): a trim would
	// have closed connections (and so relay reservations) by then.
	select {
	case <-time.After(65 * time.Second):
	case <-t.Context().Done():
	}
	rss1, cpu1, g1 := idle(fmt.Sprintf("%d peers", n))
	var peers struct {
		Peers int `json:"peers"`
	}
	resp, err := http.Get("http://" + api + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&peers)
	_ = resp.Body.Close()
	if err != nil || peers.Peers < n {
		t.Fatalf("the bootstrap node holds %d peers after the grace period, want %d (its connection manager trimmed relay clients)", peers.Peers, n)
	}
	perK := func(a, b float64) float64 { return (b - a) / float64(n) * 1000 }
	t.Logf("FIGURES peers=%d rss_mb=%.1f→%.1f (%.1f MB per 1000 peers) goroutines=%d→%d (%.0f per peer) idle_cpu=%.2f%%→%.2f%% of a core",
		n, rss0, rss1, perK(rss0, rss1), g0, g1, float64(g1-g0)/float64(n), 100*cpu0, 100*cpu1)
}

// rss reads a process's resident set in MB.
func rss(t *testing.T, pid int) float64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if kb, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(kb), " kB"), 64)
			if err != nil {
				t.Fatal(err)
			}
			return v / 1024
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// scrape reads unlabelled samples of a Prometheus text page.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(val, 64); err == nil {
			out[name] = v
		}
	}
	return out
}
