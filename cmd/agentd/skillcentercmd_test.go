package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testutil"
	"github.com/agentd/agentd/node"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/skillcenter"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"
)

// scChildEnv makes the test binary run the agentd command line given in
// it (a JSON array of arguments) as a process of its own, the way `agentd`
// would, and exit: the tests start real `agentd skillcenter serve`
// processes this way.
const scChildEnv = "AGENTD_TEST_SKILLCENTER_CHILD"

func init() {
	args := os.Getenv(scChildEnv)
	if args == "" {
		return
	}
	var argv []string
	if err := json.Unmarshal([]byte(args), &argv); err != nil {
		fmt.Fprintln(os.Stderr, scChildEnv+":", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, append([]string{"agentd"}, argv...), os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// scCatalog writes a catalog of two skills (feishu with a package,
// dingding without) and returns its directory and the package bytes.
func scCatalog(t *testing.T) (string, []byte) {
	t.Helper()
	dir := t.TempDir()
	pkg := []byte("feishu package bytes")
	sum := sha256.Sum256(pkg)
	write := func(id string, m map[string]any, pkgFile string) {
		if err := os.MkdirAll(filepath.Join(dir, id), 0o755); err != nil {
			t.Fatal(err)
		}
		b, _ := json.MarshalIndent(m, "", "  ")
		if err := os.WriteFile(filepath.Join(dir, id, "manifest.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if pkgFile != "" {
			if err := os.WriteFile(filepath.Join(dir, id, pkgFile), pkg, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	write("skill-org-feishu", map[string]any{"id": "skill-org-feishu", "name": "Feishu Organization Service", "version": "0.7.0",
		"type": "enterprise-skill", "capabilities": []string{"org-data-read", "user-auth"}, "scenes": []string{"auth"},
		"endpoint": "https://skills.example/feishu", "keywords": []string{"feishu"},
		"package": map[string]any{"file": "feishu.tgz", "sha256": hex.EncodeToString(sum[:]), "size": len(pkg)}}, "feishu.tgz")
	write("skill-org-dingding", map[string]any{"id": "skill-org-dingding", "name": "Dingding Organization Service", "version": "0.7.0",
		"type": "enterprise-skill", "capabilities": []string{"org-data-read", "user-auth"}, "scenes": []string{"auth"},
		"endpoint": "https://skills.example/dingding"}, "")
	return dir, pkg
}

// scWaitAddr waits for an address file and returns its content.
func scWaitAddr(t *testing.T, file string, exited <-chan struct{}, logs func() string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if b, err := os.ReadFile(file); err == nil && strings.HasSuffix(string(b), "\n") {
			return strings.TrimSpace(string(b))
		}
		select {
		case <-exited:
			t.Fatalf("skillcenter serve exited before serving:\n%s", logs())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("skillcenter serve did not write its address within 60 s:\n%s", logs())
		}
	}
}

// scServe runs `agentd skillcenter serve` in-process and returns its URL
// and a stop function returning the exit code.
func scServe(t *testing.T, args ...string) (string, func() int, *logWriter) {
	t.Helper()
	addrFile := filepath.Join(t.TempDir(), "addr")
	ctx, cancel := context.WithCancel(context.Background())
	logs := &logWriter{t: t}
	done := make(chan int, 1)
	exited := make(chan struct{})
	argv := append([]string{"agentd", "skillcenter", "serve", "--addr", "127.0.0.1:0", "--addr-file", addrFile, "--log-level", "debug"}, args...)
	go func() {
		done <- execute(ctx, argv, strings.NewReader(""), io.Discard, logs)
		close(exited)
	}()
	stopped := false
	stop := func() int {
		stopped = true
		cancel()
		select {
		case code := <-done:
			return code
		case <-time.After(30 * time.Second):
			t.Fatal("skillcenter serve did not stop")
			return -1
		}
	}
	t.Cleanup(func() {
		if !stopped {
			stop()
		}
	})
	addr := scWaitAddr(t, addrFile, exited, logs.String)
	return "http://" + addr, stop, logs
}

func TestSkillcenterCheckAndSign(t *testing.T) {
	dir, _ := scCatalog(t)
	r := mustRun(t, "skillcenter", "check", dir)
	if !strings.Contains(r.stdout, "skill-org-feishu 0.7.0  package feishu.tgz sha256 ") || !strings.Contains(r.stdout, "2 skills, OK") {
		t.Fatalf("check: %s", r.stdout)
	}
	// A broken package: exit 1, the file and the field named.
	pkgPath := filepath.Join(dir, "skill-org-feishu", "feishu.tgz")
	if err := os.WriteFile(pkgPath, []byte("another package, longer"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, "", "skillcenter", "check", dir)
	if r.code != exitFailed || !strings.Contains(r.stderr, filepath.Join(dir, "skill-org-feishu", "manifest.json")+": package.size: is 20;") {
		t.Fatalf("broken catalog: %d %s", r.code, r.stderr)
	}
	// sign fills the digest and size from the file, then signs with the
	// data directory's agent key.
	data := t.TempDir()
	mustRun(t, "--data-dir", data, "keygen")
	man := filepath.Join(dir, "skill-org-feishu", "manifest.json")
	r = mustRun(t, "--data-dir", data, "skillcenter", "sign", man)
	id, err := trust.LoadOrCreate(data)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.stdout, "with key "+trust.Fingerprint(&id.AgentKey.PublicKey)) {
		t.Fatalf("sign: %s", r.stdout)
	}
	r = mustRun(t, "skillcenter", "check", "--json", dir)
	var skills []catalogSkill
	if err := json.Unmarshal([]byte(r.stdout), &skills); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("another package, longer"))
	if len(skills) != 2 || skills[1].SHA256 != hex.EncodeToString(sum[:]) || skills[1].Signer != trust.Fingerprint(&id.AgentKey.PublicKey) || skills[0].Signer != "" {
		t.Fatalf("after signing: %+v", skills)
	}
	// Usage errors.
	if r := runCLI(t, "", "skillcenter", "sign", "--key", filepath.Join(data, trust.AgentKeyFile), filepath.Join(dir, "x.yaml")); r.code != exitFailed || !strings.Contains(r.stderr, "only JSON manifests") {
		t.Fatalf("YAML: %d %s", r.code, r.stderr)
	}
	if r := runCLI(t, "", "skillcenter", "serve"); r.code != exitUsage {
		t.Fatalf("serve without --catalog: %d %s", r.code, r.stderr)
	}
	if r := runCLI(t, "", "skillcenter", "serve", "--catalog", t.TempDir(), "--tls-cert", "x"); r.code != exitUsage {
		t.Fatalf("--tls-cert alone: %d %s", r.code, r.stderr)
	}
}

func TestSkillInstallAndSearchCommands(t *testing.T) {
	dir, pkg := scCatalog(t)
	url, stop, logs := scServe(t, "--catalog", dir, "--watch", "20ms")

	r := mustRun(t, "skill", "search", "--from", url, "--capability", "user-auth", "--keyword", "feishu")
	if !strings.Contains(r.stdout, "skill-org-feishu") || strings.Contains(r.stdout, "dingding") {
		t.Fatalf("search: %s", r.stdout)
	}
	r = mustRun(t, "skill", "search", "--from", url, "--json")
	var l skillcenter.SkillList
	if err := json.Unmarshal([]byte(r.stdout), &l); err != nil || l.Total != 2 {
		t.Fatalf("list: %s %v", r.stdout, err)
	}
	if r := runCLI(t, "", "skill", "search", "--from", url, "--keyword", "nothing-like-it"); r.code != exitFailed || !strings.Contains(r.stderr, "no skill matches") {
		t.Fatalf("no match: %d %s", r.code, r.stderr)
	}
	if r := runCLI(t, "", "skill", "search", "--from", url, "--type", "app"); r.code != exitUsage || !strings.Contains(r.stderr, "--type") {
		t.Fatalf("bad type: %d %s", r.code, r.stderr)
	}
	if r := runCLI(t, "", "--data-dir", t.TempDir(), "skill", "search"); r.code != exitUsage || !strings.Contains(r.stderr, "discovery.skillCenter.url") {
		t.Fatalf("no catalog: %d %s", r.code, r.stderr)
	}

	// Install into the data directory; again is "already installed".
	data := t.TempDir()
	r = mustRun(t, "--data-dir", data, "skill", "install", "--from", url, "skill-org-feishu")
	if !strings.Contains(r.stdout, "installed skill-org-feishu 0.7.0 in "+filepath.Join(data, "skills", "skill-org-feishu", "0.7.0")) || !strings.Contains(r.stdout, "manifest: unsigned") {
		t.Fatalf("install: %s", r.stdout)
	}
	got, err := os.ReadFile(filepath.Join(data, "skills", "skill-org-feishu", "0.7.0", "feishu.tgz"))
	if err != nil || string(got) != string(pkg) {
		t.Fatalf("installed package %q %v", got, err)
	}
	r = mustRun(t, "--data-dir", data, "skill", "install", "--from", url, "--json", "skill-org-feishu")
	var in skillcenter.Installed
	if err := json.Unmarshal([]byte(r.stdout), &in); err != nil || !in.Already {
		t.Fatalf("second install: %s %v", r.stdout, err)
	}
	// --require-signed refuses the unsigned manifest and writes nothing.
	data2 := t.TempDir()
	r = runCLI(t, "", "--data-dir", data2, "skill", "install", "--from", url, "--require-signed", "skill-org-feishu")
	if r.code != exitFailed || !strings.Contains(r.stderr, "not signed") {
		t.Fatalf("require-signed: %d %s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(data2, "skills", "skill-org-feishu")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a refused install left files")
	}

	// Sign the manifest; --watch reloads the catalog; a trusted key
	// installs with --require-signed.
	keyDir := t.TempDir()
	mustRun(t, "--data-dir", keyDir, "keygen")
	mustRun(t, "--data-dir", keyDir, "skillcenter", "sign", filepath.Join(dir, "skill-org-feishu", "manifest.json"))
	scWaitServed(t, url+"/api/skills/skill-org-feishu", `"signature"`)
	r = mustRun(t, "--data-dir", t.TempDir(), "skill", "install", "--from", url, "--require-signed",
		"--trusted-key", filepath.Join(keyDir, trust.AgentPubFile), "skill-org-feishu")
	if !strings.Contains(r.stdout, ", trusted") {
		t.Fatalf("signed install: %s", r.stdout)
	}
	other := t.TempDir()
	mustRun(t, "--data-dir", other, "keygen")
	r = runCLI(t, "", "--data-dir", t.TempDir(), "skill", "install", "--from", url, "--trusted-key", filepath.Join(other, trust.AgentPubFile), "skill-org-feishu")
	if r.code != exitFailed || !strings.Contains(r.stderr, "not one of the trusted keys") {
		t.Fatalf("other trusted key: %d %s", r.code, r.stderr)
	}
	if code := stop(); code != exitOK {
		t.Fatalf("serve exited %d:\n%s", code, logs.String())
	}
}

// scWaitServed polls url until its body holds want.
func scWaitServed(t *testing.T, url, want string) {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, fmt.Sprintf("%s to serve %q", url, want), func() bool {
		code, body := get(t, http.MethodGet, url, "")
		return code == http.StatusOK && strings.Contains(string(body), want)
	})
}

var scHostSeq atomic.Int64

// scNode starts a node with no peer (DHT and gossip on) over a mocknet.
func scNode(t *testing.T, cat node.Catalog) *node.Node {
	t.Helper()
	id, err := trust.Generate()
	if err != nil {
		t.Fatal(err)
	}
	mn := mocknet.New()
	t.Cleanup(func() { _ = mn.Close() })
	h, err := mn.AddPeer(id.PeerKey, ma.StringCast(fmt.Sprintf("/ip6/100::%x/tcp/4243", scHostSeq.Add(1))))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(node.Config{LookupTimeout: 5 * time.Second}, node.Options{Identity: id, Host: h, Store: st, Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(); _ = st.Close() })
	return n
}

// scClock is a settable clock for the catalog client's cache.
type scClock struct{ off atomic.Int64 }

func (c *scClock) Now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *scClock) Advance(d time.Duration) { c.off.Add(int64(d)) }

// TestFallbackOrderWithServeProcess runs the fallback order against a real
// `agentd skillcenter serve` process: a node with no peer falls through
// to it (source skillcenter); once the process is stopped the same query
// answers from the client's expired cache (stale); with nothing cached the
// resolver has nothing to answer with.
func TestFallbackOrderWithServeProcess(t *testing.T) {
	dir, _ := scCatalog(t)
	addrFile := filepath.Join(t.TempDir(), "addr")
	argv, _ := json.Marshal([]string{"skillcenter", "serve", "--catalog", dir, "--addr", "127.0.0.1:0", "--addr-file", addrFile})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), scChildEnv+"="+string(argv))
	out := &logWriter{t: t}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	url := "http://" + scWaitAddr(t, addrFile, exited, out.String)

	clk := &scClock{}
	c, err := skillcenter.NewClient(url, skillcenter.Options{Now: clk.Now, Retries: 1, Backoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	n := scNode(t, c)
	ctx := context.Background()
	q := node.Query{Filter: store.Filter{Capability: "org-data-read"}}

	res, err := n.Discover(ctx, q)
	if err != nil || len(res) != 2 {
		t.Fatalf("through the mirror process: %+v %v", res, err)
	}
	for _, r := range res {
		if r.Source != store.SourceSkillCenter || r.Stale {
			t.Fatalf("result %+v", r)
		}
	}
	// Explain says where the agent came from and which step answered.
	ex, err := n.Explain(ctx, node.ExplainQuery{Filter: store.Filter{AgentID: res[0].Agent.AgentID, Capability: "org-data-read"}})
	if err != nil || ex.Verdict != node.ExplainVisible || ex.Resolver.AnsweredBy != "skillcenter" ||
		len(ex.Heard) != 1 || ex.Heard[0].Transport != "skillcenter" || ex.Heard[0].Kind != "entry" {
		t.Fatalf("explain a catalog agent: %v %+v", err, ex)
	}

	// Stop the process (SIGTERM: a clean exit) and let the cache expire.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("skillcenter serve did not stop on SIGTERM:\n%s", out.String())
	}
	if waitErr != nil {
		t.Fatalf("skillcenter serve: %v\n%s", waitErr, out.String())
	}
	if !strings.Contains(out.String(), `msg="skillcenter stopped"`) {
		t.Fatalf("no clean stop in the log:\n%s", out.String())
	}
	if _, err := os.Stat(addrFile); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the address file outlived the process")
	}
	clk.Advance(301 * time.Second)
	res, err = n.Discover(ctx, q)
	if err != nil || len(res) != 2 {
		t.Fatalf("stale: %+v %v", res, err)
	}
	for _, r := range res {
		if !r.Stale || r.Age < 300*time.Second {
			t.Fatalf("stale result %+v", r)
		}
	}

	// Nothing cached, no mirror, no peer: a network error (DISC_005);
	// nothing configured: nothing found (DISC_002).
	c2, err := skillcenter.NewClient(url, skillcenter.Options{Retries: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c2.Close() })
	var de *node.DiscoveryError
	if _, err := scNode(t, c2).Discover(ctx, q); !errors.As(err, &de) || de.Code != record.CodeNetworkError {
		t.Fatalf("nothing cached, mirror down: %v", err)
	}
	if _, err := scNode(t, nil).Discover(ctx, q); !errors.As(err, &de) || de.Code != record.CodeNoSkillsFound {
		t.Fatalf("nothing at all: %v", err)
	}
}
