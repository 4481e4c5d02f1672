package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/client"
)

// watcher runs `agentd watch --json` and collects its events.
type watcher struct {
	events chan client.Event
}

func watch(t *testing.T, api string, args ...string) *watcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, agentdBin, append([]string{"watch", "--json", "--api", api}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errOut, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until the daemon acknowledged the subscription.
	logs := &syncBuf{}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(errOut)
		once := false
		for sc.Scan() {
			_, _ = logs.Write(append(sc.Bytes(), '\n'))
			if !once && strings.HasPrefix(sc.Text(), "watching") {
				once = true
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatalf("watch did not start:\n%s", logs.String())
	}
	w := &watcher{events: make(chan client.Event, 256)}
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var e client.Event
			if err := json.Unmarshal(sc.Bytes(), &e); err == nil {
				w.events <- e
			}
		}
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if t.Failed() {
			t.Logf("watch stderr:\n%s", logs.String())
		}
	})
	return w
}

// next waits for an event of agentID satisfying ok.
func (w *watcher) next(t *testing.T, d time.Duration, what string, ok func(client.Event) bool) client.Event {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case e := <-w.events:
			if ok(e) {
				return e
			}
		case <-deadline:
			t.Fatalf("watch: no %s within %s", what, d)
		}
	}
}

// TestWatchAcrossProcesses is issue 4's multi-process test: `agentd watch`
// on one daemon shows another daemon's register, status change and
// deregister, and the deregistration of a daemon killed with SIGKILL.
// The daemons use a fast health check (1 s heartbeats, 6 s timeout) from a
// configuration file, so the kill -9 case takes seconds.
func TestWatchAcrossProcesses(t *testing.T) {
	root := t.TempDir()
	cfg := filepath.Join(root, "fast.yaml")
	if err := os.WriteFile(cfg, []byte("discovery:\n  healthCheck:\n    heartbeatInterval: 1000\n    timeout: 6000\n    unhealthyThreshold: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// n3 runs without early failure detection: it shows the seed's
	// fallback (UNHEALTHY after 3 missed heartbeats, gone after the
	// timeout) while n1 drops a crashed agent as soon as it is confirmed.
	seedOnly := filepath.Join(root, "seed-only.yaml")
	if err := os.WriteFile(seedOnly, []byte("discovery:\n  healthCheck:\n    heartbeatInterval: 1000\n    timeout: 6000\n    unhealthyThreshold: 3\n    suspicion: false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bs := startBootstrap(t, filepath.Join(root, "bs"))
	n1 := startDaemon(t, "n1", filepath.Join(root, "n1"), "--bootstrap", bs, "--config", cfg)
	n2 := startDaemon(t, "n2", filepath.Join(root, "n2"), "--bootstrap", bs, "--config", cfg)
	n3 := startDaemon(t, "n3", filepath.Join(root, "n3"), "--bootstrap", bs, "--config", seedOnly)
	eventually(t, 10*time.Second, "n1 and n2 connected", func() bool {
		p, _ := n1.health()["peers"].(float64)
		return p >= 2
	})
	agent := n2.health()["agent_id"].(string)
	w := watch(t, n1.api, "--agent", agent, "--capability", "product.search")
	w3 := watch(t, n3.api, "--agent", agent, "--capability", "product.search")

	if r := cli(t, "register", "-f", repoFile(t, "examples/agentspec.yaml"), "--api", n2.api); r.code != 0 {
		t.Fatalf("register: %+v", r)
	}
	w.next(t, 10*time.Second, "registered", func(e client.Event) bool { return e.Type == "registry.agent.registered" })

	if r := cli(t, "status", "set", "--api", n2.api, "DEGRADED"); r.code != 0 {
		t.Fatalf("status set: %+v", r)
	}
	w.next(t, 10*time.Second, "status DEGRADED", func(e client.Event) bool {
		return e.Type == "registry.agent.status" && e.Status == "DEGRADED"
	})

	if r := cli(t, "unregister", "--api", n2.api, "--reason", "MAINTENANCE"); r.code != 0 {
		t.Fatalf("unregister: %+v", r)
	}
	w.next(t, 10*time.Second, "deregistered MAINTENANCE", func(e client.Event) bool {
		return e.Type == "registry.agent.deregistered" && e.Reason == "MAINTENANCE"
	})

	// Register again, then crash n2: no unregister is sent. n1 loses its
	// connection, cannot reach n2 again, nor can the peer it asks (n3):
	// the agent is gone at once. n3 notices the silence (UNHEALTHY after
	// 3 missed heartbeats, gone after the timeout).
	if r := cli(t, "register", "-f", repoFile(t, "examples/agentspec.yaml"), "--api", n2.api); r.code != 0 {
		t.Fatalf("register again: %+v", r)
	}
	beats := n1.metric(`agentd_gossip_delivered_total{type="heartbeat"}`)
	w.next(t, 10*time.Second, "registered again", func(e client.Event) bool { return e.Type == "registry.agent.registered" })
	w3.next(t, 10*time.Second, "registered again at n3", func(e client.Event) bool { return e.Type == "registry.agent.registered" })
	// Crash only once n1 has heard a heartbeat of the new registration.
	eventually(t, 10*time.Second, "a heartbeat at n1", func() bool {
		return n1.metric(`agentd_gossip_delivered_total{type="heartbeat"}`) > beats
	})
	eventually(t, 10*time.Second, "a heartbeat at n3", func() bool {
		return n3.metric(`agentd_gossip_delivered_total{type="heartbeat"}`) > 0
	})
	killed := time.Now() // kill waits for the process to exit
	n2.kill()
	w.next(t, 15*time.Second, "deregistered PEER_UNREACHABLE after kill -9", func(e client.Event) bool {
		if e.Type == "registry.agent.deregistered" && e.Reason != "PEER_UNREACHABLE" {
			t.Errorf("n1: deregistered %s, want PEER_UNREACHABLE (early detection)", e.Reason)
		}
		return e.Type == "registry.agent.deregistered"
	})
	detected := time.Since(killed)
	// Counted once the investigation ends, just after the drop.
	eventually(t, 5*time.Second, "n1 to count its confirmed suspicion", func() bool {
		return n1.metric(`agentd_liveness_suspicions_total{outcome="confirmed"}`) >= 1
	})
	w3.next(t, 15*time.Second, "UNHEALTHY after kill -9 at n3", func(e client.Event) bool {
		return e.Type == "registry.agent.status" && e.Status == "UNHEALTHY"
	})
	unhealthy := time.Since(killed)
	w3.next(t, 20*time.Second, "deregistered TIMEOUT after kill -9 at n3", func(e client.Event) bool {
		return e.Type == "registry.agent.deregistered" && e.Reason == "TIMEOUT"
	})
	t.Logf("after kill -9: n1 dropped the agent at %s (early detection); n3 (seed rules only) marked it UNHEALTHY at %s, dropped it at %s",
		detected.Round(time.Millisecond), unhealthy.Round(100*time.Millisecond), time.Since(killed).Round(100*time.Millisecond))
}
