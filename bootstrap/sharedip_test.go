package bootstrap

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/dht"
	"github.com/agentd/agentd/internal/testutil"
	"github.com/agentd/agentd/p2p"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// The many-agents-on-one-IP test runs its hosts inside a network namespace
// it creates, on 10.77.0.1 (a veth address: not loopback, which go-libp2p's
// resource manager exempts). The parent test makes the namespace and runs
// this test binary inside it as a child process.
const (
	envChild    = "AGENTD_NETNS_CHILD" // "agentd" or "default": which resource manager the child uses
	sharedIP    = "10.77.0.1"
	sharedNodes = 20 // one bootstrap node, one provider, 18 queriers
)

func TestManyAgentsOnOneIP(t *testing.T) {
	if mode := os.Getenv(envChild); mode != "" {
		sharedIPChild(t, mode)
		return
	}
	if os.Geteuid() != 0 {
		testutil.SkipEnv(t, "SKIPPED: the many-agents-on-one-IP test needs root to create a network namespace (ip netns add); run the tests as root to prove the resource-manager configuration")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		testutil.SkipEnv(t, "SKIPPED: the many-agents-on-one-IP test needs the `ip` command (iproute2) to create a network namespace")
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	ns := "agentd-test-" + hex.EncodeToString(suffix)
	ipCmd := func(args ...string) error {
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := ipCmd("netns", "add", ns); err != nil {
		testutil.SkipEnv(t, "SKIPPED: cannot create a network namespace here (%v); the many-agents-on-one-IP test did not run", err)
	}
	t.Cleanup(func() { _ = ipCmd("netns", "del", ns) })
	for _, args := range [][]string{
		{"link", "add", "v0", "type", "veth", "peer", "name", "v1"},
		{"addr", "add", sharedIP + "/24", "dev", "v0"},
		{"link", "set", "v0", "up"},
		{"link", "set", "v1", "up"},
		{"link", "set", "lo", "up"},
	} {
		if err := ipCmd(append([]string{"netns", "exec", ns, "ip"}, args...)...); err != nil {
			t.Fatal(err)
		}
	}
	run := func(mode string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ns, os.Args[0],
			"-test.run", "^TestManyAgentsOnOneIP$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), envChild+"="+mode)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("agentd")
	t.Log("agentd resource manager (p2p.New):\n" + resultLines(out))
	if err != nil {
		t.Fatalf("with agentd's resource manager: %v\n%s", err, out)
	}
	// The contrast: go-libp2p's default resource manager, same setup. It
	// is reported, not asserted.
	out, err = run("default")
	t.Log("go-libp2p default resource manager (contrast, not asserted):\n" + resultLines(out))
	if err != nil {
		t.Logf("default-limits child exited with %v", err)
	}
}

func resultLines(out string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "RESULT") || strings.Contains(l, "phase:") {
			keep = append(keep, strings.TrimSpace(l))
		}
	}
	if len(keep) == 0 {
		return out
	}
	return strings.Join(keep, "\n")
}

func newSharedIPHost(t *testing.T, mode string, id *trust.Identity) host.Host {
	t.Helper()
	listen := "/ip4/" + sharedIP + "/tcp/0"
	var (
		h   host.Host
		err error
	)
	if mode == "agentd" {
		h, err = p2p.New(p2p.Config{Key: id.PeerKey, Listen: []string{listen}, DisableMetrics: true})
	} else {
		h, err = libp2p.New(libp2p.Identity(id.PeerKey), libp2p.ListenAddrStrings(listen), libp2p.DisableMetrics())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

func sharedIPChild(t *testing.T, mode string) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Generous timeouts: under -race with every package's tests sharing two
	// cores, a Noise handshake can take seconds. The default resource
	// manager refuses at once, so its failures are not timeouts.
	cfg := dht.Config{FetchTimeout: 20 * time.Second, QueryTimeout: 30 * time.Second, RetryInterval: 200 * time.Millisecond}

	bootHost := newSharedIPHost(t, mode, mustID(t))
	boot, err := StartNode(ctx, bootHost, NodeConfig{DHT: cfg}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = boot.Close() })
	bootInfo, err := peer.AddrInfoFromP2pAddr(boot.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(boot.Addrs()[0].String(), "/ip4/"+sharedIP+"/tcp/") {
		t.Fatalf("bootstrap node is not on %s: %v", sharedIP, boot.Addrs())
	}

	type agent struct {
		id *trust.Identity
		h  host.Host
		d  *dht.DHT
		hs *hosted
	}
	agents := make([]*agent, sharedNodes-1)
	for i := range agents {
		id := mustID(t)
		h := newSharedIPHost(t, mode, id)
		v, err := trust.NewVerifier(trust.Config{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		hs := &hosted{id: id}
		if i == 0 {
			hs.sa = signed(t, id, "skill-lan", "cap-lan")
		}
		d, err := dht.New(h, cfg, v, hs, nil, slog.New(findLog{t: t, agent: i}))
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		agents[i] = &agent{id: id, h: h, d: d, hs: hs}
	}
	// Everyone joins through the bootstrap node, four at a time, as agents
	// started together on one machine would.
	var (
		bmu        sync.Mutex
		bootFailed int
		retried    int
		bwg        sync.WaitGroup
		bsem       = make(chan struct{}, 4)
	)
	for i, a := range agents {
		bwg.Add(1)
		go func() {
			defer bwg.Done()
			bsem <- struct{}{}
			defer func() { <-bsem }()
			// One retry, as the node's join loop would: under -race with
			// every package's tests on two cores a handshake can starve.
			// Both modes get the same treatment; retries are reported.
			err := a.d.Bootstrap(ctx, []peer.AddrInfo{*bootInfo})
			if err != nil {
				t.Logf("agent %d bootstrap (retrying once): %v", i, err)
				bmu.Lock()
				retried++
				bmu.Unlock()
				err = a.d.Bootstrap(ctx, []peer.AddrInfo{*bootInfo})
			}
			if err != nil {
				bmu.Lock()
				bootFailed++
				bmu.Unlock()
				t.Logf("agent %d bootstrap: %v", i, err)
			}
		}()
	}
	bwg.Wait()
	t.Logf("phase: %d hosts bootstrapped after %s", len(agents), time.Since(start).Round(time.Millisecond))
	// The agent registers once it has joined: its skill keys go to the
	// closest peers of the network as it is now.
	prov := agents[0]
	prov.d.SetProvided([]*record.SignedAgent{prov.hs.sa})
	deadline := time.Now().Add(20 * time.Second)
	for (prov.d.Status().LastProvide.IsZero() || prov.d.Status().PendingRetries > 0) && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond): // polling with a deadline
		}
	}

	var (
		mu          sync.Mutex
		found       int
		findRetried int
		failed      []string
		wg          sync.WaitGroup
		sem         = make(chan struct{}, 6)
	)
	for i, a := range agents[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			ok := func(fs []dht.Found, err error) bool {
				return err == nil && len(fs) == 1 && fs[0].Provider == prov.h.ID()
			}
			fs, err := a.d.Find(ctx, "skill-lan", "cap-lan", 1)
			if !ok(fs, err) {
				// One more try, as for the joins: under make test's load a
				// record fetch from the provider can miss its deadline (a
				// find drops such a provider), which is not what this test
				// is about. Twice in a row is. The second find starts once
				// the agent holds a connection to the provider, or after
				// 2 s without one.
				first := fmt.Sprintf("%d results, %v", len(fs), err)
				testutil.Within(2*time.Second, func() bool {
					return a.h.Network().Connectedness(prov.h.ID()) == network.Connected
				})
				fs, err = a.d.Find(ctx, "skill-lan", "cap-lan", 1)
				mu.Lock()
				findRetried++
				mu.Unlock()
				if !ok(fs, err) {
					mu.Lock()
					failed = append(failed, fmt.Sprintf("agent %d: %s, then %d results, %v (connectedness to the provider %s, routing table %d)",
						i+1, first, len(fs), err, a.h.Network().Connectedness(prov.h.ID()), a.d.RoutingTableSize()))
					mu.Unlock()
					return
				}
			}
			mu.Lock()
			found++
			mu.Unlock()
		}()
	}
	wg.Wait()
	t.Logf("phase: finds done after %s", time.Since(start).Round(time.Millisecond))

	rtMin, rtSum := 1<<30, 0
	for _, a := range agents {
		n := a.d.RoutingTableSize()
		rtSum += n
		rtMin = min(rtMin, n)
	}
	conns := len(bootHost.Network().Peers())
	t.Logf("RESULT mode=%s ip=%s nodes=%d bootstrap_failed=%d/%d (retried %d) bootstrap_node_conns=%d find_ok=%d/%d (retried %d) routing_table_min=%d avg=%.1f elapsed=%s",
		mode, sharedIP, sharedNodes, bootFailed, len(agents), retried, conns, found, len(agents)-1, findRetried, rtMin, float64(rtSum)/float64(len(agents)), time.Since(start).Round(time.Millisecond))
	if mode != "agentd" {
		return // the contrast is reported, never asserted
	}
	if bootFailed > 0 || found != len(agents)-1 {
		t.Fatalf("agents on one IP could not all join and find the provider: %d bootstrap failures, %d/%d finds; %v", bootFailed, found, len(agents)-1, failed)
	}
}

// findLog passes to the test's log the DHT's debug lines that say why a
// find came back empty: a provide that reached fewer peers than asked, a
// provider dropped because its record could not be fetched, a fetched
// record refused. They show only when the test fails.
type findLog struct {
	t     *testing.T
	agent int
}

func (l findLog) Enabled(context.Context, slog.Level) bool { return true }

func (l findLog) Handle(_ context.Context, r slog.Record) error {
	switch r.Message {
	case "dht provider dropped", "fetched record rejected", "dht provide failed", "dht provide reached no peer", "dht provide reached few of the closest peers", "dht provided":
	default:
		return nil
	}
	var b strings.Builder
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	l.t.Logf("agent %d dht: %s%s", l.agent, r.Message, b.String())
	return nil
}

func (l findLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l findLog) WithGroup(string) slog.Handler      { return l }
