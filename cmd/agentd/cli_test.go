package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/agentd/agentd/config"
	"github.com/agentd/agentd/p2p"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
)

func TestUsage(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string // in stdout+stderr
	}{
		{nil, exitUsage, "USAGE:"},
		{[]string{"bogus"}, exitUsage, `unknown command "bogus"`},
		{[]string{"--bogus"}, exitUsage, "flag provided but not defined: -bogus"},
		{[]string{"run", "--bogus"}, exitUsage, "flag provided but not defined: -bogus"},
		{[]string{"run", "extra"}, exitUsage, "run takes no arguments"},
		{[]string{"record"}, exitUsage, "validate"},
		{[]string{"record", "bogus"}, exitUsage, `unknown command "bogus"`},
		{[]string{"record", "sign"}, exitUsage, "FILE is required"},
		{[]string{"record", "verify", "a", "b"}, exitUsage, "takes one FILE"},
		{[]string{"record", "sign", "x.yaml", "--out", "y"}, exitUsage, "flags go before FILE"},
		{[]string{"config"}, exitUsage, "print"},
		{[]string{"version", "x"}, exitUsage, "takes no arguments"},
		{[]string{"--help"}, exitOK, "COMMANDS:"},
		{[]string{"help", "run"}, exitOK, "SIGTERM"},
		{[]string{"run", "--help"}, exitOK, "--api-addr-file"},
		{[]string{"keygen", "--help"}, exitOK, "never overwrites"},
		{[]string{"config", "print", "--help"}, exitOK, "<redacted>"},
		{[]string{"record", "sign", "--help"}, exitOK, "Announce"},
		{[]string{"record", "verify", "--help"}, exitOK, "no trust policy"},
		{[]string{"record", "validate", "--help"}, exitOK, "offending field"},
		{[]string{"version", "--help"}, exitOK, "protocol version"},
	}
	for _, tc := range cases {
		r := runCLI(t, "", tc.args...)
		if r.code != tc.code || !strings.Contains(r.stdout+r.stderr, tc.want) {
			t.Errorf("agentd %s: exit %d, want %d and %q in output\nstdout: %s\nstderr: %s",
				strings.Join(tc.args, " "), r.code, tc.code, tc.want, r.stdout, r.stderr)
		}
	}
}

func TestVersion(t *testing.T) {
	r := mustRun(t, "version")
	for _, want := range []string{"agentd ", "protocol: " + record.ProtocolVersion, runtime.Version()} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("version output lacks %q:\n%s", want, r.stdout)
		}
	}
	var v versionInfo
	if err := json.Unmarshal([]byte(mustRun(t, "version", "--json").stdout), &v); err != nil {
		t.Fatal(err)
	}
	if v.ProtocolVersion != record.ProtocolVersion || v.GoVersion != runtime.Version() || v.Version == "" {
		t.Errorf("version --json = %+v", v)
	}
}

func TestKeygen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	var first keygenResult
	if err := json.Unmarshal([]byte(mustRun(t, "--data-dir", dir, "keygen", "--json").stdout), &first); err != nil {
		t.Fatal(err)
	}
	if !first.Created || first.DataDir != dir || first.PublicKeyPath != filepath.Join(dir, trust.AgentPubFile) {
		t.Errorf("first keygen = %+v", first)
	}
	if err := record.ValidateAgentID(first.AgentID); err != nil {
		t.Errorf("agent_id: %v", err)
	}
	for name, mode := range map[string]os.FileMode{trust.AgentKeyFile: 0o600, trust.PeerKeyFile: 0o600, trust.AgentPubFile: 0o644, trust.AgentIDFile: 0o644} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != mode {
			t.Errorf("%s mode %o, want %o", name, st.Mode().Perm(), mode)
		}
	}
	keyBefore, err := os.ReadFile(filepath.Join(dir, trust.AgentKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	// Again, flag after the command and text output: same identity, kept.
	r := mustRun(t, "keygen", "--data-dir", dir)
	for _, want := range []string{"already exists", first.AgentID, first.PeerID, first.Fingerprint} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("second keygen lacks %q:\n%s", want, r.stdout)
		}
	}
	keyAfter, _ := os.ReadFile(filepath.Join(dir, trust.AgentKeyFile))
	if string(keyBefore) != string(keyAfter) {
		t.Error("keygen overwrote the agent key")
	}
	// The environment variable names the data directory too.
	t.Setenv(config.EnvDataDir, dir)
	if r := mustRun(t, "keygen"); !strings.Contains(r.stdout, first.AgentID) {
		t.Errorf("keygen with %s: %s", config.EnvDataDir, r.stdout)
	}
}

func TestKeygenRefusesOpenKey(t *testing.T) {
	dir := t.TempDir()
	mustRun(t, "--data-dir", dir, "keygen")
	if err := os.Chmod(filepath.Join(dir, trust.AgentKeyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "", "--data-dir", dir, "keygen")
	if r.code != exitFailed || !strings.Contains(r.stderr, "too open") {
		t.Errorf("exit %d, stderr %s", r.code, r.stderr)
	}
}

// printConfig runs `config print` and parses its YAML output back, which
// also checks that the output is a valid configuration file.
func printConfig(t *testing.T, args ...string) config.Config {
	t.Helper()
	r := mustRun(t, append(args, "config", "print")...)
	c, err := config.Parse("config-print.yaml", []byte(r.stdout))
	if err != nil {
		t.Fatalf("config print output does not parse: %v\n%s", err, r.stdout)
	}
	return c
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigPrintDefaults(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	c := printConfig(t)
	want := config.Default()
	want.DataDir = filepath.Join(home, ".agentd")
	want.Listen = p2p.DefaultListen
	if c.DataDir != want.DataDir || strings.Join(c.Listen, ",") != strings.Join(want.Listen, ",") ||
		c.API != want.API || c.Log != want.Log || c.Discovery.UDP != want.Discovery.UDP {
		t.Errorf("config print with no configuration:\n got %+v\nwant %+v", c, want)
	}
}

func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "agentd.yaml", `dataDir: `+filepath.Join(dir, "from-file")+`
log:
  level: debug
  format: json
api:
  addr: 127.0.0.1:5000
discovery:
  udp:
    port: 6000
`)
	// File over defaults.
	c := printConfig(t, "--config", file)
	if c.Log.Level != "debug" || c.Log.Format != "json" || c.API.Addr != "127.0.0.1:5000" || c.Discovery.UDP.Port != 6000 ||
		c.DataDir != filepath.Join(dir, "from-file") || c.Cache.MaxSize != 1000 {
		t.Errorf("file over defaults: %+v", c)
	}
	// Environment over file (AGENTD_CONFIG names the file).
	t.Setenv(config.EnvConfig, file)
	t.Setenv(config.EnvLogLevel, "warn")
	t.Setenv(config.EnvAPI, "127.0.0.1:5001")
	t.Setenv(config.EnvListen, "/ip4/127.0.0.1/tcp/1, /ip4/127.0.0.1/udp/1/quic-v1")
	t.Setenv(config.EnvNoLAN, "true")
	t.Setenv(config.EnvTrustPolicy, "allowlist")
	t.Setenv(config.EnvBootstrap, "/ip4/192.0.2.1/tcp/4777/p2p/12D3KooWCZDx2y7zSiZsCJbHdPomHwkHkeV6tLKKXBYZpxX14fkJ")
	t.Setenv(config.EnvLANInterface, "eth0")
	t.Setenv(config.EnvClientMode, "1")
	// allowlist needs entries; they can only come from the file.
	if r := runCLI(t, "", "config", "print"); r.code != exitFailed || !strings.Contains(r.stderr, "trust.allowList: is empty") {
		t.Fatalf("allowlist without entries: exit %d, %s", r.code, r.stderr)
	}
	t.Setenv(config.EnvTrustPolicy, "open")
	c = printConfig(t)
	if c.Log.Level != "warn" || c.Log.Format != "json" || c.API.Addr != "127.0.0.1:5001" ||
		strings.Join(c.Listen, ",") != "/ip4/127.0.0.1/tcp/1,/ip4/127.0.0.1/udp/1/quic-v1" ||
		c.Discovery.UDP.Enabled || c.Discovery.MDNS.Enabled || c.Discovery.Interface != "eth0" || !c.Discovery.DHT.ClientMode ||
		len(c.Discovery.DHT.BootstrapNodes) != 1 || c.Discovery.UDP.Port != 6000 {
		t.Errorf("environment over file: %+v", c)
	}
	if _, err := c.Discovery.DHT.BootstrapNodes[0].AddrInfo(); err != nil {
		t.Errorf("bootstrap from environment: %v", err)
	}
	// Flags over environment, before or after the command; after wins.
	r := mustRun(t, "--log-level", "info", "--data-dir", filepath.Join(dir, "global"), "config", "print",
		"--log-level", "error", "--api", "127.0.0.1:5002", "--listen", "/ip4/127.0.0.1/tcp/3", "--json")
	var j struct {
		DataDir string   `json:"dataDir"`
		Listen  []string `json:"listen"`
		API     struct{ Addr string }
		Log     struct{ Level string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil {
		t.Fatalf("config print --json: %v\n%s", err, r.stdout)
	}
	if j.Log.Level != "error" || j.API.Addr != "127.0.0.1:5002" || strings.Join(j.Listen, ",") != "/ip4/127.0.0.1/tcp/3" ||
		j.DataDir != filepath.Join(dir, "global") {
		t.Errorf("flags over environment: %+v", j)
	}
}

func TestConfigPrintRedactsSecrets(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "s.yaml", `api:
  jwtSecret: "0123456789abcdef0123456789abcdef-secret"
discovery:
  udp:
    hmacKey: hmac-secret-value
registry:
  url: https://registry.example
  token: token-secret-value
`)
	for _, format := range [][]string{nil, {"--json"}} {
		r := mustRun(t, append([]string{"-c", file, "config", "print"}, format...)...)
		if strings.Contains(r.stdout, "secret") || !strings.Contains(r.stdout, config.Redacted) {
			t.Errorf("secrets not redacted:\n%s", r.stdout)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	bad := writeFile(t, dir, "bad.yaml", "log:\n  level: info\ndiscovery:\n  udp:\n    port: 70000\n")
	r := runCLI(t, "", "--config", bad, "config", "print")
	if want := bad + ":5: discovery.udp.port: 70000 is not a port (1-65535)"; r.code != exitFailed || !strings.Contains(r.stderr, want) {
		t.Errorf("bad file: exit %d, stderr %q, want %q", r.code, r.stderr, want)
	}
	r = runCLI(t, "", "--config", filepath.Join(dir, "missing.yaml"), "run")
	if r.code != exitFailed || !strings.Contains(r.stderr, "missing.yaml") {
		t.Errorf("missing file: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runCLI(t, "", "config", "print", "--api", "0.0.0.0:4778")
	if r.code != exitFailed || !strings.Contains(r.stderr, "--api / AGENTD_API: api.addr: 0.0.0.0:4778 is not a loopback address") {
		t.Errorf("public API: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runCLI(t, "", "config", "print", "--listen", "tcp://x")
	if r.code != exitFailed || !strings.Contains(r.stderr, "--listen / AGENTD_LISTEN: listen[0]:") {
		t.Errorf("bad listen: exit %d, stderr %q", r.code, r.stderr)
	}
	t.Setenv(config.EnvLogFormat, "xml")
	r = runCLI(t, "", "config", "print")
	if r.code != exitFailed || !strings.Contains(r.stderr, `--log-format / AGENTD_LOG_FORMAT: log.format: "xml" is not one of text, json`) {
		t.Errorf("bad env: exit %d, stderr %q", r.code, r.stderr)
	}
	t.Setenv(config.EnvLogFormat, "")
	if r = runCLI(t, "", "config", "print", "--min-free", "lots"); r.code != exitUsage || !strings.Contains(r.stderr, `--min-free / AGENTD_MIN_FREE: "lots" is not a size`) {
		t.Errorf("bad size: exit %d, stderr %q", r.code, r.stderr)
	}
	if r = runCLI(t, "", "config", "print", "--min-free", "2TiB"); r.code != exitFailed || !strings.Contains(r.stderr, "storage.minFree: 2 TiB is more than 1 TiB") {
		t.Errorf("size out of range: exit %d, stderr %q", r.code, r.stderr)
	}
	t.Setenv(config.EnvNoLAN, "maybe")
	if r = runCLI(t, "", "config", "print"); r.code != exitUsage || !strings.Contains(r.stderr, config.EnvNoLAN) {
		t.Errorf("bad boolean env: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestSeed001ConfigRuns(t *testing.T) {
	c := printConfig(t, "--config", filepath.Join("..", "..", "config", "testdata", "seed-001.yaml"))
	if c.Discovery.DHT.ReplicationFactor != 3 || len(c.Discovery.DHT.BootstrapNodes) != 1 || c.Discovery.SkillCenter.URL != "https://skillcenter.ooder.net" {
		t.Errorf("seed-001 config: %+v", c.Discovery)
	}
}
