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
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/agentd/agentd/internal/fsutil"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/skillcenter"
	"github.com/agentd/agentd/trust"
	"github.com/urfave/cli/v2"
)

// Flags of `agentd skillcenter`.
const (
	scFlagCatalog      = "catalog"
	scFlagAddr         = "addr"
	scFlagAddrFile     = "addr-file"
	scFlagPublicURL    = "public-url"
	scFlagWatch        = "watch"
	scFlagJWTSecret    = "jwt-secret"
	scFlagJWTPublicKey = "jwt-public-key"
	scFlagLease        = "registration-lease"
	scFlagTLSCert      = "tls-cert"
	scFlagTLSKey       = "tls-key"
	scFlagKey          = "key"
	scFlagCert         = "cert"
	scFlagOut          = "out"
	scFlagNoDigest     = "keep-package-digest"

	// scEnvJWTSecret is the environment variable of --jwt-secret.
	scEnvJWTSecret = "AGENTD_SKILLCENTER_JWT_SECRET"
	// scDefaultAddr is where the mirror listens by default.
	scDefaultAddr = "127.0.0.1:4780"
)

// skillcenterCommand is `agentd skillcenter`: the mirror of the SkillCenter
// API and its catalog tools.
func skillcenterCommand() *cli.Command {
	return &cli.Command{
		Name:   "skillcenter",
		Usage:  "serve a SkillCenter catalog (docs/skillcenter.md) from a directory, check and sign its manifests",
		Action: groupAction,
		Subcommands: []*cli.Command{
			{
				Name:  "serve",
				Usage: "serve the SkillCenter API from a catalog directory until SIGINT or SIGTERM",
				Description: "Serves GET /api/skills, GET /api/skills/{id}, POST /api/skills/search and\n" +
					"GET /api/skills/{id}/download from --catalog DIR: DIR/<id>/manifest.json (or\n" +
					".yaml) for each skill and the package file it names (see docs/skillcenter.md).\n" +
					"The catalog is checked as a whole when it loads; SIGHUP reloads it, and so does\n" +
					"--watch when its files change (a catalog that fails to load is reported and the\n" +
					"one being served is kept).\n\n" +
					"With --jwt-secret (" + scEnvJWTSecret + ") or --jwt-public-key the mirror is\n" +
					"also a seed-000 registry: POST /agents (discover:write), GET /agents and\n" +
					"GET /agents/{id} (discover:read); registered agents' skills join the catalog's\n" +
					"answers until their --registration-lease passes without a new POST.",
				Flags: withGlobal(
					&cli.StringFlag{Name: scFlagCatalog, Usage: "catalog `DIR` (required)"},
					&cli.StringFlag{Name: scFlagAddr, Value: scDefaultAddr, Usage: "listen on `HOST:PORT`"},
					&cli.StringFlag{Name: scFlagAddrFile, Usage: "write the bound address (host:port) to `FILE` once serving, and remove it on exit"},
					&cli.StringFlag{Name: scFlagPublicURL, Usage: "base `URL` clients reach the mirror at, for downloadUrl (default: from each request)"},
					&cli.DurationFlag{Name: scFlagWatch, Usage: "reload when the catalog's files change, checking every `DURATION` (0: only on SIGHUP)"},
					&cli.StringFlag{Name: scFlagJWTSecret, EnvVars: []string{scEnvJWTSecret}, Usage: "HS256 `SECRET` (at least 32 bytes) of the registry's bearer tokens"},
					&cli.StringFlag{Name: scFlagJWTPublicKey, Usage: "ES256 public key `FILE` (PEM) of the registry's bearer tokens"},
					&cli.DurationFlag{Name: scFlagLease, Value: skillcenter.DefaultRegistrationLease, Usage: "how long a registration lives without a new POST"},
					&cli.StringFlag{Name: scFlagTLSCert, Usage: "serve HTTPS with this certificate `FILE` (PEM, with --tls-key)"},
					&cli.StringFlag{Name: scFlagTLSKey, Usage: "the TLS private key `FILE` (PEM)"},
				),
				Action: skillcenterServe,
			},
			{
				Name:      "check",
				Usage:     "check a catalog directory as serve would load it",
				ArgsUsage: "DIR",
				Description: "Loads DIR as `agentd skillcenter serve` does and prints the skills, or every\n" +
					"problem found, each naming the file and the field; exits 1 on a problem.",
				Flags:  withGlobal(&cli.BoolFlag{Name: flagJSON, Usage: "print JSON"}),
				Action: skillcenterCheck,
			},
			{
				Name:      "sign",
				Usage:     "fill a JSON manifest's package digest and size and sign it (ES256)",
				ArgsUsage: "MANIFEST",
				Description: "Signs MANIFEST (a manifest.json) with --key (default: the agent key of the\n" +
					"data directory, " + trust.AgentKeyFile + "), adding --cert (a PEM bundle, leaf first, e.g. from\n" +
					"`agentd ca issue --skill ID`) when given. Before signing, package.sha256 and\n" +
					"package.size are set from the package file beside the manifest (unless\n" +
					"--" + scFlagNoDigest + "), so the signature covers the package. The signature is over\n" +
					"\"agentd.skill_manifest.v1\\n\" + the RFC 8785 form of the manifest without its\n" +
					"signature member. The manifest is replaced atomically, or written to --out.",
				Flags: withGlobal(
					&cli.StringFlag{Name: scFlagKey, Usage: "ECDSA P-256 private key `FILE` (PEM)"},
					&cli.StringFlag{Name: scFlagCert, Usage: "certificate bundle `FILE` (PEM, leaf first) certifying the key for the skill"},
					&cli.StringFlag{Name: scFlagOut, Usage: "write the signed manifest to `FILE` instead of replacing MANIFEST (- for standard output)"},
					&cli.BoolFlag{Name: scFlagNoDigest, Usage: "sign the package digest and size as they are"},
				),
				Action: skillcenterSign,
			},
		},
	}
}

func skillcenterServe(c *cli.Context) error {
	if c.NArg() > 0 {
		return usagef("skillcenter serve takes no arguments (got %q)", c.Args().First())
	}
	cfg, err := effectiveConfig(c)
	if err != nil {
		return err
	}
	dir := c.String(scFlagCatalog)
	if dir == "" {
		return usagef("skillcenter serve: --%s DIR is required", scFlagCatalog)
	}
	log := newLogger(c.App.ErrWriter, cfg.Log)
	cat, err := skillcenter.LoadCatalog(dir)
	if err != nil {
		return fmt.Errorf("catalog: %w", err)
	}
	var jwtPub []byte
	if f := c.String(scFlagJWTPublicKey); f != "" {
		if jwtPub, err = os.ReadFile(f); err != nil {
			return fmt.Errorf("--%s: %w", scFlagJWTPublicKey, err)
		}
	}
	if c.Duration(scFlagWatch) < 0 || c.Duration(scFlagLease) <= 0 {
		return usagef("skillcenter serve: --%s must not be negative and --%s must be positive", scFlagWatch, scFlagLease)
	}
	certFile, keyFile := c.String(scFlagTLSCert), c.String(scFlagTLSKey)
	if (certFile == "") != (keyFile == "") {
		return usagef("skillcenter serve: --%s and --%s go together", scFlagTLSCert, scFlagTLSKey)
	}
	srv, err := skillcenter.NewServer(cat, skillcenter.ServerOptions{
		PublicURL: c.String(scFlagPublicURL), JWTSecret: c.String(scFlagJWTSecret), JWTPublicKeyPEM: jwtPub,
		RegistrationLease: c.Duration(scFlagLease), Logger: log,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.String(scFlagAddr))
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.String(scFlagAddr), err)
	}
	hs := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	serveErr := make(chan error, 1)
	go func() {
		if certFile != "" {
			serveErr <- hs.ServeTLS(ln, certFile, keyFile)
		} else {
			serveErr <- hs.Serve(ln)
		}
	}()
	addr := ln.Addr().String()
	addrFile := c.String(scFlagAddrFile)
	if addrFile != "" {
		if addrFile, err = filepath.Abs(addrFile); err == nil {
			err = fsutil.WriteFileAtomic(addrFile, []byte(addr+"\n"), 0o644)
		}
		if err != nil {
			_ = hs.Close()
			if serr := <-serveErr; !errors.Is(serr, http.ErrServerClosed) {
				log.Warn("skillcenter server ended", "err", serr)
			}
			return fmt.Errorf("--%s: %w", scFlagAddrFile, err)
		}
		defer func() { _ = os.Remove(addrFile) }()
	}
	scheme := "http"
	if certFile != "" {
		scheme = "https"
	}
	log.Info("skillcenter serving", "url", scheme+"://"+addr, "catalog", dir, "skills", cat.Len(),
		"registry", c.String(scFlagJWTSecret) != "" || len(jwtPub) > 0)

	// Reloads: SIGHUP, and --watch polling; one goroutine owns both and
	// ends with the command.
	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()
	reloaded := make(chan struct{})
	go func() {
		defer close(reloaded)
		watchCatalog(ctx, srv, dir, c.Duration(scFlagWatch), log)
	}()

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("skillcenter shutting down", "reason", context.Cause(ctx))
	case err := <-serveErr:
		serveErr <- err
		runErr = fmt.Errorf("serve: %w", err)
	}
	cancel()
	<-reloaded
	sctx, scancel := context.WithTimeout(context.WithoutCancel(c.Context), 10*time.Second)
	defer scancel()
	if err := hs.Shutdown(sctx); err != nil {
		_ = hs.Close()
	}
	if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) && runErr == nil {
		runErr = err
	}
	if runErr != nil {
		log.Error("skillcenter stopped with an error", "err", runErr)
		return errReported
	}
	log.Info("skillcenter stopped")
	return nil
}

// watchCatalog reloads the catalog on SIGHUP and, when every > 0, when
// its files change, until ctx ends.
func watchCatalog(ctx context.Context, srv *skillcenter.Server, dir string, every time.Duration, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var tick <-chan time.Time
	last := ""
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
		last, _ = skillcenter.Fingerprint(dir)
	}
	reload := func(why string) {
		if err := srv.Reload(); err != nil {
			log.Error("catalog reload failed; keeping the catalog being served", "why", why, "err", err)
			return
		}
		log.Info("catalog reloaded", "why", why, "skills", srv.Catalog().Len())
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			reload("SIGHUP")
		case <-tick:
			fp, err := skillcenter.Fingerprint(dir)
			if err != nil {
				log.Warn("catalog watch failed", "dir", dir, "err", err)
				continue
			}
			if fp != last {
				last = fp
				reload("files changed")
			}
		}
	}
}

// catalogSkill is one line of `skillcenter check`.
type catalogSkill struct {
	ID        string `json:"id"`
	Version   string `json:"version"`
	Package   string `json:"package,omitempty"`
	SHA256    string `json:"sha256,omitempty"`
	Signer    string `json:"signer,omitempty"`
	SignedFor string `json:"signed_for,omitempty"`
}

func skillcenterCheck(c *cli.Context) error {
	dir, err := oneArg(c, "DIR")
	if err != nil {
		return err
	}
	cat, err := skillcenter.LoadCatalog(dir)
	if err != nil {
		return err
	}
	var out []catalogSkill
	for _, e := range cat.Entries() {
		cs := catalogSkill{ID: e.Manifest.ID, Version: e.Manifest.Version}
		if p := e.Manifest.Package; p != nil {
			cs.Package, cs.SHA256 = p.File, p.SHA256
		}
		if e.Signer != nil {
			cs.Signer, cs.SignedFor = e.Signer.Fingerprint, e.Signer.Subject
		}
		out = append(out, cs)
	}
	if c.Bool(flagJSON) {
		if out == nil {
			out = []catalogSkill{}
		}
		return json.NewEncoder(c.App.Writer).Encode(out)
	}
	var b strings.Builder
	for _, cs := range out {
		fmt.Fprintf(&b, "%s %s", cs.ID, cs.Version)
		if cs.Package != "" {
			fmt.Fprintf(&b, "  package %s sha256 %s", cs.Package, cs.SHA256)
		}
		if cs.Signer != "" {
			fmt.Fprintf(&b, "  signed by key %s", cs.Signer)
		} else {
			b.WriteString("  unsigned")
		}
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "%s: %d skills, OK\n", dir, len(out))
	return emit(c.App.Writer, &b)
}

func skillcenterSign(c *cli.Context) error {
	path, err := oneArg(c, "MANIFEST")
	if err != nil {
		return err
	}
	if ext := strings.ToLower(filepath.Ext(path)); ext == ".yaml" || ext == ".yml" {
		return fmt.Errorf("%s: only JSON manifests are signed (convert it to manifest.json)", path)
	}
	keyFile := c.String(scFlagKey)
	if keyFile == "" {
		cfg, err := effectiveConfig(c)
		if err != nil {
			return err
		}
		keyFile = filepath.Join(cfg.DataDir, trust.AgentKeyFile)
	}
	key, err := trust.LoadAgentKey(keyFile)
	if err != nil {
		return fmt.Errorf("--%s %s: %w", scFlagKey, keyFile, err)
	}
	var certPEM string
	if f := c.String(scFlagCert); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("--%s: %w", scFlagCert, err)
		}
		certPEM = string(b)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if !c.Bool(scFlagNoDigest) {
		if raw, err = fillPackageDigest(path, raw); err != nil {
			return err
		}
	}
	signed, err := skillcenter.SignManifest(raw, key, certPEM)
	if err != nil {
		return &record.SourceError{File: path, Err: err}
	}
	switch out := c.String(scFlagOut); out {
	case "-":
		_, err = c.App.Writer.Write(signed)
		return err
	case "":
		if err := fsutil.WriteFileAtomic(path, signed, 0o644); err != nil {
			return err
		}
		_, err = fmt.Fprintf(c.App.Writer, "signed %s with key %s\n", path, trust.Fingerprint(&key.PublicKey))
		return err
	default:
		if err := fsutil.WriteFileAtomic(out, signed, 0o644); err != nil {
			return err
		}
		_, err = fmt.Fprintf(c.App.Writer, "signed %s with key %s into %s\n", path, trust.Fingerprint(&key.PublicKey), out)
		return err
	}
}

// fillPackageDigest sets package.sha256 and package.size of a JSON
// manifest from the package file beside it; a manifest without package is
// returned as it is.
func fillPackageDigest(path string, raw []byte) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("%s: not a JSON object", path)
	}
	rp, ok := obj["package"]
	if !ok {
		return raw, nil
	}
	var pkg map[string]any
	if err := json.Unmarshal(rp, &pkg); err != nil {
		return nil, fmt.Errorf("%s: package: must be an object", path)
	}
	file, _ := pkg["file"].(string)
	if file == "" || filepath.Base(file) != file {
		return nil, fmt.Errorf("%s: package.file: must name a file beside the manifest", path)
	}
	sum, size, err := fileDigest(filepath.Join(filepath.Dir(path), file))
	if err != nil {
		return nil, fmt.Errorf("%s: package.file: %w", path, err)
	}
	pkg["sha256"], pkg["size"] = sum, size
	b, err := json.Marshal(pkg)
	if err != nil {
		return nil, err
	}
	obj["package"] = b
	return json.Marshal(obj)
}

// fileDigest returns the lowercase hex SHA-256 and the size of a file.
func fileDigest(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
