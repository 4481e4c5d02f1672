package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/daemon"
	"github.com/agentd/agentd/trust"
)

// startRun runs `agentd run` in-process on loopback with ephemeral ports
// and returns the API address, a function that stops it and returns the
// exit code, and the log.
func startRun(t *testing.T, dataDir string, extra ...string) (addr string, stop func() int, logs *logWriter) {
	t.Helper()
	addrFile := filepath.Join(t.TempDir(), "api.addr")
	ctx, cancel := context.WithCancel(context.Background())
	logs = &logWriter{t: t}
	args := append([]string{"agentd", "--data-dir", dataDir, "run",
		"--listen", "/ip4/127.0.0.1/tcp/0", "--listen", "/ip4/127.0.0.1/udp/0/quic-v1",
		"--api", "127.0.0.1:0", "--api-addr-file", addrFile, "--no-lan", "--no-port-mapping", "--log-level", "debug"}, extra...)
	done := make(chan int, 1)
	go func() { done <- execute(ctx, args, strings.NewReader(""), io.Discard, logs) }()
	stopped := false
	stop = func() int {
		if stopped {
			t.Fatal("stopped twice")
		}
		stopped = true
		cancel()
		select {
		case code := <-done:
			return code
		case <-time.After(60 * time.Second):
			t.Fatal("agentd run did not stop within 60 s of cancellation")
			return -1
		}
	}
	t.Cleanup(func() {
		if !stopped {
			stop()
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		if b, err := os.ReadFile(addrFile); err == nil && strings.HasSuffix(string(b), "\n") {
			return strings.TrimSpace(string(b)), stop, logs
		}
		select {
		case code := <-done:
			stopped = true
			t.Fatalf("agentd run exited with %d before serving:\n%s", code, logs.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("agentd run did not write the API address within 60 s:\n%s", logs.String())
		}
	}
}

// get fetches a URL without keep-alive (no idle connection goroutines are
// left behind for goleak).
func get(t *testing.T, method, url, host string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func TestRunServesHealthAndShutsDownCleanly(t *testing.T) {
	dir := t.TempDir()
	addr, stop, logs := startRun(t, dir)

	code, body := get(t, http.MethodGet, "http://"+addr+"/healthz", "")
	if code != http.StatusOK {
		t.Fatalf("GET /healthz: %d %s", code, body)
	}
	var h api.Health
	if err := json.Unmarshal(body, &h); err != nil {
		t.Fatalf("healthz body: %v\n%s", err, body)
	}
	agentID, err := os.ReadFile(filepath.Join(dir, trust.AgentIDFile))
	if err != nil {
		t.Fatal(err)
	}
	if h.Status != "ok" || h.AgentID != strings.TrimSpace(string(agentID)) || h.PeerID == "" || h.UptimeSeconds < 0 || h.ProtocolVersion == "" {
		t.Errorf("healthz = %+v", h)
	}
	var tcp, quic bool
	for _, a := range h.Listen {
		if !strings.HasPrefix(a, "/ip4/127.0.0.1/") || !strings.HasSuffix(a, "/p2p/"+h.PeerID) {
			t.Errorf("listen address %s is not a loopback address of this peer", a)
		}
		tcp = tcp || strings.Contains(a, "/tcp/")
		quic = quic || strings.Contains(a, "/quic-v1/")
	}
	if !tcp || !quic {
		t.Errorf("listen = %v, want TCP and QUIC", h.Listen)
	}
	if code, _ := get(t, http.MethodHead, "http://"+addr+"/healthz", ""); code != http.StatusOK {
		t.Errorf("HEAD /healthz: %d", code)
	}
	if code, body := get(t, http.MethodPost, "http://"+addr+"/healthz", ""); code != http.StatusMethodNotAllowed || !strings.Contains(string(body), "ErrMethodNotAllowed") {
		t.Errorf("POST /healthz: %d %s", code, body)
	}
	if code, _ := get(t, http.MethodGet, "http://"+addr+"/nope", ""); code != http.StatusNotFound {
		t.Errorf("GET /nope: %d", code)
	}
	if code, _ := get(t, http.MethodGet, "http://"+addr+"/healthz", "attacker.example:80"); code != http.StatusMisdirectedRequest {
		t.Errorf("foreign Host: %d", code)
	}
	if code, _ := get(t, http.MethodGet, "http://"+addr+"/healthz", "localhost:4778"); code != http.StatusOK {
		t.Errorf("Host localhost: %d", code)
	}

	if code := stop(); code != 0 {
		t.Fatalf("exit code %d after cancellation:\n%s", code, logs.String())
	}
	for _, want := range []string{"agentd running", "shutting down", "agentd stopped"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q", want)
		}
	}
	// Everything is closed: the port refuses connections, the address file
	// is gone, and the store's lock is released (a second run opens it and
	// keeps the identity).
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		_ = c.Close()
		t.Error("API port still accepts connections after shutdown")
	}
	addr2, stop2, _ := startRun(t, dir)
	_, body = get(t, http.MethodGet, "http://"+addr2+"/healthz", "")
	var h2 api.Health
	if err := json.Unmarshal(body, &h2); err != nil || h2.AgentID != h.AgentID || h2.PeerID != h.PeerID {
		t.Errorf("second run: identity changed: %+v vs %+v (%v)", h2, h, err)
	}
	if code := stop2(); code != 0 {
		t.Errorf("second run exit %d", code)
	}
}

func TestRunFailsCleanlyWhenAPIPortIsTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	dir := t.TempDir()
	logs := &logWriter{t: t}
	code := execute(context.Background(), []string{"agentd", "--data-dir", dir, "run",
		"--listen", "/ip4/127.0.0.1/tcp/0", "--api", ln.Addr().String(), "--no-lan", "--no-port-mapping"}, strings.NewReader(""), io.Discard, logs)
	if code != exitFailed || !strings.Contains(logs.String(), "API listen on "+ln.Addr().String()) {
		t.Fatalf("exit %d, log:\n%s", code, logs.String())
	}
	// The store and host opened before the failure were closed: a new run
	// on the same data directory starts.
	_, stop, _ := startRun(t, dir)
	if code := stop(); code != 0 {
		t.Errorf("run after a failed run: exit %d", code)
	}
}

func TestRunRefusesPublicAPIWithoutAuth(t *testing.T) {
	r := runCLI(t, "", "--data-dir", t.TempDir(), "run", "--api", "0.0.0.0:0")
	if r.code != exitFailed || !strings.Contains(r.stderr, "needs auth") {
		t.Errorf("exit %d, stderr %s", r.code, r.stderr)
	}
}

func TestCloseWithinGivesUp(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	finished := make(chan struct{})
	cancel()
	err := daemon.CloseWithin(ctx, func(context.Context) error {
		defer close(finished)
		<-release
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v", err)
	}
	close(release)
	<-finished
}
