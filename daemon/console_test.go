package daemon_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/golang-jwt/jwt/v5"

	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/config"
	"github.com/agentd/agentd/daemon"
	"github.com/agentd/agentd/internal/testutil"
	"github.com/agentd/agentd/record"
)

// The operator's console in a real browser (Debian's chromium, headless):
// two daemons over loopback TCP, agents registered on both; every page of
// /ui loads without a console error, shows the node, its peer and the
// agents that exist, follows registrations and departures live, and the
// search and explain pages answer. With AGENTD_SCREENSHOTS=DIR set, each
// page is saved as DIR/<page>.png (make console-screenshots: docs/console/).
func TestConsoleInBrowser(t *testing.T) {
	br := newBrowser(t)
	ctx := context.Background()
	cfgA := testConfig(t)
	cfgA.Discovery.Scope = "full"
	a, err := daemon.Start(ctx, cfgA, daemon.Options{Version: "console-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Close(ctx) }()
	cfgB := testConfig(t)
	cfgB.Discovery.Scope = "full"
	cfgB.Discovery.DHT.BootstrapNodes = []config.BootstrapNode{{Multiaddr: a.Node.Health().Addrs[0]}}
	b, err := daemon.Start(ctx, cfgB, daemon.Options{Version: "console-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close(ctx) }()
	ca, err := client.New(a.APIURL())
	if err != nil {
		t.Fatal(err)
	}
	cb, err := client.New(b.APIURL())
	if err != nil {
		t.Fatal(err)
	}
	agent := func(name, capability string) *record.Agent {
		a := &record.Agent{AgentName: name, Description: "console test agent " + name,
			Transport: record.Transport{Type: "http", Endpoint: "http://127.0.0.1:9/" + name},
			Skills: []record.Skill{{SkillID: "skill-" + name, Version: "1.0.0", SkillType: record.SkillTool, Endpoint: "http://127.0.0.1:9/" + name,
				Capabilities: []record.Capability{{ID: capability}}}}}
		a.SyncCapabilities()
		return a
	}
	hosted, err := ca.Register(ctx, agent("translator", "text.translate"))
	if err != nil {
		t.Fatal(err)
	}

	remote, err := cb.Register(ctx, agent("summarizer", "text.summarize"))
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "b's agent in a's view", func() bool {
		_, err := ca.Get(ctx, remote.Agent.AgentID)
		return err == nil
	})

	run, text, shot := br.run, br.text, br.shot
	ui := a.APIURL() + "/ui/"

	// Node: identity, transports.
	run("node page", chromedp.Navigate(ui+"#node"), chromedp.WaitVisible(chromedp.CSS("#node-agent-id")))
	if got := text("#node-agent-id"); got != a.Identity.AgentID {
		t.Fatalf("node page agent_id %q, want %q", got, a.Identity.AgentID)
	}
	run("events connected", chromedp.WaitVisible(chromedp.CSS(`#conn.ok`)), shot("node"))

	// Peers: b, directly connected.
	run("peers page", chromedp.Navigate(ui+"#peers"), chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`tr[data-peer=%q]`, b.Identity.PeerID.String()))), shot("peers"))

	// Agents: both, by capability; a registration and a departure appear
	// without reloading.
	run("agents page", chromedp.Navigate(ui+"#agents"),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`[data-capability="text.summarize"] tr[data-agent=%q]`, remote.Agent.AgentID))),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`[data-capability="text.translate"] tr[data-agent=%q]`, hosted.Agent.AgentID))))
	late, err := cb.Register(ctx, agent("classifier", "text.classify"))
	if err != nil {
		t.Fatal(err)
	}
	run("a registration shows up", chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`tr[data-agent=%q]`, late.Agent.AgentID))), shot("agents"))

	if err := cb.Unregister(ctx, late.Agent.AgentID, record.ReasonShutdown); err != nil {
		t.Fatal(err)
	}
	run("a departure shows up", chromedp.WaitNotPresent(chromedp.CSS(fmt.Sprintf(`tr[data-agent=%q]`, late.Agent.AgentID))))

	// Events: the live stream.
	run("events page", chromedp.Navigate(ui+"#events"), chromedp.WaitVisible(chromedp.CSS("#event-rows")))
	again, err := cb.Register(ctx, agent("ranker", "text.rank"))
	if err != nil {
		t.Fatal(err)
	}
	run("a registered event", chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`tr[data-event="registry.agent.registered"][data-agent=%q]`, again.Agent.AgentID))), shot("events"))
	run("filter the events", chromedp.SendKeys(chromedp.CSS("#event-filter"), "text.rank"),
		chromedp.WaitNotPresent(chromedp.CSS(fmt.Sprintf(`tr[data-agent=%q]`, late.Agent.AgentID))),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`tr[data-agent=%q]`, again.Agent.AgentID))))

	// Search: the resolver's path for a capability.
	run("search page", chromedp.Navigate(ui+"#search"), chromedp.WaitVisible(chromedp.CSS("#search-form")),
		chromedp.SendKeys(chromedp.CSS(`#search-form input[name="capability"]`), "text.summarize"),
		chromedp.Click(chromedp.CSS(`#search-form button`)),
		chromedp.WaitVisible(chromedp.CSS(`#verdict[data-verdict="found"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#steps [data-step="local"].answered`)),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#search-out tr[data-agent=%q]`, remote.Agent.AgentID))), shot("search"))

	// A link to a query runs it.
	run("a search link", chromedp.Navigate(ui+"#search?capability=text.translate&local_only=true"),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#search-out tr[data-agent=%q]`, hosted.Agent.AgentID))))

	// Explain: a visible agent (heard by gossip) and one never heard of.
	run("explain page", chromedp.Navigate(ui+"#explain/"+remote.Agent.AgentID),
		chromedp.WaitVisible(chromedp.CSS(`#verdict[data-verdict="visible"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#explain-out tr[data-transport="gossip"]`)), shot("explain"))
	run("explain an unknown agent", chromedp.Navigate(ui+"#explain/2f6b1c8e-7d4a-4e3b-9a5c-1d2e3f4a5b6c"),
		chromedp.WaitVisible(chromedp.CSS(`#verdict[data-verdict="unknown"]`)))

	// Simnet: a report of `agentd simnet --json` opened as charts.
	report, err := filepath.Abs(filepath.Join("testdata", "simnet-report.json"))
	if err != nil {
		t.Fatal(err)
	}
	run("simnet page", chromedp.Navigate(ui+"#simnet"), chromedp.WaitVisible(chromedp.CSS("#simnet-file")),
		chromedp.SetUploadFiles(chromedp.CSS("#simnet-file"), []string{report}),
		chromedp.WaitVisible(chromedp.CSS(`#simnet-charts [data-series="recall"] polyline`)), shot("simnet"))
	// Text from outside (here a report whose failure names markup) shows
	// as text and never runs.
	raw, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	markup := `<img src=x onerror="document.body.dataset.pwned=1">`
	hostile := filepath.Join(t.TempDir(), "hostile.json")
	if err := os.WriteFile(hostile, []byte(strings.Replace(string(raw), `"scenario": {`, `"failures": [`+strconv.Quote(markup)+`], "scenario": {`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	run("a hostile report", chromedp.SetUploadFiles(chromedp.CSS("#simnet-file"), []string{hostile}),
		chromedp.WaitVisible(chromedp.CSS(`#simnet-charts`)))
	if got := text("#simnet-out"); !strings.Contains(got, "FAIL: "+markup) {
		t.Fatalf("the report's failure shows as %q", got)
	}
	run("markup stays text", chromedp.WaitNotPresent(chromedp.CSS("main img")), chromedp.WaitNotPresent(chromedp.CSS("body[data-pwned]")))

	br.noProblems()
}

// The console of an API that requires a token asks for it before it
// shows anything, then works with it: the API calls carry it, and the
// event WebSocket offers it as a subprotocol.
func TestConsoleWithToken(t *testing.T) {
	br := newBrowser(t)
	ctx := context.Background()
	cfg := testConfig(t)
	cfg.API.JWTSecret = strings.Repeat("console-secret-", 3)
	cfg.API.RequireAuthOnLoopback = true
	d, err := daemon.Start(ctx, cfg, daemon.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Close(ctx) }()
	now := time.Now()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "operator", "scope": "discover:read",
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}).SignedString([]byte(cfg.API.JWTSecret))
	if err != nil {
		t.Fatal(err)
	}
	br.run("the token prompt", chromedp.Navigate(d.APIURL()+"/ui/#node"), chromedp.WaitVisible(chromedp.CSS("#need-token")),
		chromedp.WaitVisible(chromedp.CSS("#token")))
	br.run("enter the token", chromedp.SendKeys(chromedp.CSS("#token"), tok), chromedp.Click(chromedp.CSS("#token-form button")),
		chromedp.WaitVisible(chromedp.CSS("#node-agent-id")), chromedp.WaitVisible(chromedp.CSS("#conn.ok")))
	if got := br.text("#node-agent-id"); got != d.Identity.AgentID {
		t.Fatalf("agent_id %q, want %q", got, d.Identity.AgentID)
	}
	br.noProblems()
}

// browser is a headless chromium driven by chromedp, which records every
// warning, error and exception of the pages it shows.
type browser struct {
	t        *testing.T
	ctx      context.Context
	mu       sync.Mutex
	problems []string
	stop     func()
	shots    string
}

// It skips the test where Debian's chromium is not installed (fails under
// CI, where .ci/run installs it).
func newBrowser(t *testing.T) *browser {
	t.Helper()
	chrome := findChromium()
	if chrome == "" {
		testutil.SkipEnv(t, "chromium is not installed (apt-get install chromium)")
	}
	// The browser starts on its first action, on ctx, which has no
	// timeout (a timeout there would stop the browser); each step then
	// gets its own.
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 900), chromedp.Flag("disable-gpu", true))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	br := &browser{t: t, ctx: ctx, shots: os.Getenv("AGENTD_SCREENSHOTS")}
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		acancel()
		t.Fatalf("start chromium: %v", err)
	}
	// Every console message, exception and browser-log entry of warning
	// level or above is a failure.
	cctx, ccancel := context.WithCancel(ctx)
	messages := chromedp.Console(cctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for m, err := range messages {
			if err != nil {
				return
			}
			switch m.Type {
			case chromedp.ConsoleWarning, chromedp.ConsoleError, chromedp.ConsoleException:
				br.mu.Lock()
				br.problems = append(br.problems, fmt.Sprintf("%s (%s:%d)", m.String(), m.URL, m.Line))
				br.mu.Unlock()
			}
		}
	}()
	var once sync.Once
	br.stop = func() {
		once.Do(func() {
			ccancel()
			wg.Wait()
			cancel()
			acancel()
		})
	}
	t.Cleanup(br.stop)
	return br
}

// run runs steps, each run within a minute; on failure it reports what
// the page shows and the console's problems.
func (br *browser) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	t := br.t
	t.Helper()
	sctx, cancel := context.WithTimeout(br.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(sctx, steps...); err != nil {
		dctx, dcancel := context.WithTimeout(br.ctx, 5*time.Second)
		defer dcancel()
		page, _ := chromedp.Run(dctx, chromedp.Text(chromedp.CSS("main")))
		br.mu.Lock()
		defer br.mu.Unlock()
		t.Fatalf("%s: %v\nthe page shows:\n%s\nconsole problems so far: %q", what, err, page, br.problems)
	}
}

func (br *browser) text(sel string) string {
	br.t.Helper()
	sctx, cancel := context.WithTimeout(br.ctx, time.Minute)
	defer cancel()
	s, err := chromedp.Run(sctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		br.t.Fatalf("read %s: %v", sel, err)
	}
	return s
}

// shot saves the page as <AGENTD_SCREENSHOTS>/<name>.png when that
// directory is set.
func (br *browser) shot(name string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if br.shots == "" {
			return nil
		}
		png, err := chromedp.FullScreenshot(100)(ctx, tg)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(br.shots, name+".png"), png, 0o644)
	})
}

// noProblems stops the browser and fails the test if a page logged a
// warning, an error or an exception.
func (br *browser) noProblems() {
	br.t.Helper()
	br.stop()
	br.mu.Lock()
	defer br.mu.Unlock()
	if len(br.problems) > 0 {
		br.t.Fatalf("the console logged problems:\n%s", strings.Join(br.problems, "\n"))
	}
}

func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}
