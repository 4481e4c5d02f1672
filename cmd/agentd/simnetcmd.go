package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/agentd/agentd/config"
	"github.com/agentd/agentd/gossip"
	"github.com/agentd/agentd/node"
	"github.com/agentd/agentd/p2p"
	"github.com/agentd/agentd/simnet"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/urfave/cli/v2"
)

const (
	flagSimNodes         = "nodes"
	flagSimBootstrap     = "bootstrap-nodes"
	flagSimDuration      = "duration"
	flagSimSeed          = "seed"
	flagSimLatency       = "latency"
	flagSimJitter        = "jitter"
	flagSimBandwidth     = "bandwidth"
	flagSimConnLow       = "conn-low"
	flagSimConnHigh      = "conn-high"
	flagSimConnGrace     = "conn-grace"
	flagSimMeshDegree    = "mesh-degree"
	flagSimFloodPublish  = "flood-publish"
	flagSimHeartbeat     = "heartbeat-interval"
	flagSimGossipBeat    = "gossip-beat-every"
	flagSimBeatRequests  = "beat-requests"
	flagSimTrailingSyncs = "trailing-syncs"
	flagSimTimeout       = "liveness-timeout"
	flagSimLoss          = "loss"
	flagSimScope         = "scope"
	flagSimChurnInterval = "churn-interval"
	flagSimChurnFraction = "churn-fraction"
	flagSimScenario      = "scenario"
	flagSimPartitionFor  = "partition-for"
	flagSimMassJoin      = "mass-join"
	flagSimSybilAgents   = "sybil-agents"
	flagSimSybilRate     = "sybil-rate"
	flagSimSybilFresh    = "sybil-fresh-peers"
	flagSimQueryRate     = "query-rate"
	flagSimQueryInterest = "query-interest"
	flagSimCapabilities  = "capabilities"
	flagSimSkills        = "skills"
	flagSimUniform       = "uniform"
	flagSimMinRecall     = "min-recall"
	flagSimMaxStale      = "max-stale"
	flagSimJSON          = "json"
	flagSimSVG           = "svg"
	flagSimQuiet         = "quiet"
	flagSimNodeLogs      = "node-logs"
	flagSimCPUProfile    = "cpuprofile"
	flagSimMemProfile    = "memprofile"
	flagSimClock         = "clock"
)

// Clocks of a simnet run.
const (
	clockVirtual = "virtual"
	clockReal    = "real"
)

// The GC target percentage of a simnet run when GOGC is not set in the
// environment. In virtual time memory bounds the simulation's size first:
// Go's default (400 saved ~8 % of the wall time at 150 nodes and doubled
// the resident memory). In real time the CPU bounds it, and the runs that
// fit are small: fewer collections.
const (
	simnetGOGC     = 100
	simnetGOGCReal = 400
)

// simnetMemoryShare is the share of the machine's RAM a simnet run's Go
// heap may use (runtime/debug.SetMemoryLimit) when GOMEMLIMIT is not set.
const simnetMemoryShare = 0.85

func simnetCommand() *cli.Command {
	// Every node's heartbeat defaults to the daemon's.
	health := config.Default().Discovery.HealthCheck
	return &cli.Command{
		Name:  "simnet",
		Usage: "simulate many agentd nodes in one process under churn and report what discovery achieved",
		Description: "Runs --nodes complete agentd nodes (DHT, gossip, live view, resolver; LAN off) and\n" +
			"--bootstrap-nodes bootstrap nodes over an in-memory network with the given link\n" +
			"latency, jitter and bandwidth. After a warm-up (every node starts,\n" +
			"registers an agent with 1-3 skills and sees every other agent) the scenario runs\n" +
			"for --duration: churn (every --churn-interval, --churn-fraction of the nodes leave,\n" +
			"half gracefully and half by crash, and as many join, half restarting a departed\n" +
			"node with its identity and store), partition (two halves for --partition-for, then\n" +
			"heal), massjoin (--mass-join fresh nodes at once), steady, or sybil (at a quarter\n" +
			"of the run one hostile peer floods --sybil-agents fake agents at --sybil-rate per\n" +
			"second, each claiming a one-day heartbeat interval, then crashes). Nodes issue discover\n" +
			"queries at --query-rate per second; every answer is scored against ground truth.\n\n" +
			"The report goes to stdout (a table), --json FILE and --svg FILE. Progress goes to\n" +
			"stderr: a bar on a terminal, a log line every 10 s otherwise, nothing with --quiet.\n" +
			"Exit code 1 when recall is below --min-recall or the stale rate above --max-stale\n" +
			"(stderr says which), or when the run failed.\n\n" +
			"--clock virtual (the default) runs the simulation in virtual time (Go's\n" +
			"testing/synctest): the clock advances only when every node is idle, so a busy CPU\n" +
			"delays the run, not the messages, and results do not depend on the machine's\n" +
			"speed; the wall time may be longer or shorter than --duration. --clock real runs\n" +
			"against the wall clock: when the machine cannot keep up, the delays show up in\n" +
			"the results. See docs/simnet.md.",
		Flags: withGlobal(
			&cli.StringFlag{Name: flagSimScenario, Value: string(simnet.KindChurn), Usage: "`SCENARIO`: churn, partition, massjoin, steady or sybil"},
			&cli.StringFlag{Name: flagSimClock, Value: clockVirtual, Usage: "`CLOCK`: virtual (simulated time; the clock waits for the CPU) or real (wall-clock time)"},
			&cli.IntFlag{Name: flagSimNodes, Value: 100, Usage: "agent nodes at the start"},
			&cli.IntFlag{Name: flagSimBootstrap, Value: 3, Usage: "bootstrap nodes (no agent, never churn)"},
			&cli.DurationFlag{Name: flagSimDuration, Value: 2 * time.Minute, Usage: "length of the measured run, after the warm-up"},
			&cli.Uint64Flag{Name: flagSimSeed, Value: 1, Usage: "seed of every random choice (catalog, workload, churn, jitter, identities)"},
			&cli.DurationFlag{Name: flagSimLatency, Value: 20 * time.Millisecond, Usage: "one-way link latency"},
			&cli.DurationFlag{Name: flagSimJitter, Value: 5 * time.Millisecond, Usage: "per-link latency spread: each link gets latency ± a uniform draw up to this"},
			&cli.Float64Flag{Name: flagSimBandwidth, Value: 0, Usage: "per-link bandwidth in bytes per second (0 = unlimited)"},
			&cli.IntFlag{Name: flagSimConnLow, Value: p2p.DefaultLowWater, Usage: "connection manager low watermark of every node (agentd's default)"},
			&cli.IntFlag{Name: flagSimConnHigh, Value: p2p.DefaultHighWater, Usage: "connection manager high watermark of every node (agentd's default)"},
			&cli.DurationFlag{Name: flagSimConnGrace, Value: p2p.DefaultConnGrace, Usage: "connection manager grace period of every node: a newer connection is never trimmed (agentd's default)"},
			&cli.IntFlag{Name: flagSimMeshDegree, Value: pubsub.GossipSubD, Usage: "GossipSub mesh degree D of every node, 2 to 32 (Dlo, Dhi, Dscore and Dout follow it as pubsub's defaults follow 6; agentd's default)"},
			&cli.BoolFlag{Name: flagSimFloodPublish, Value: true, Usage: "every node sends its own messages to every topic peer, not only its mesh (agentd's default; --flood-publish=false turns it off)"},
			&cli.DurationFlag{Name: flagSimHeartbeat, Value: health.HeartbeatInterval.D(), Usage: "heartbeat interval of every node, 10ms to 24h (agentd's default, seed 001's); an agent is UNHEALTHY after 3 missed"},
			&cli.IntFlag{Name: flagSimGossipBeat, Value: node.DefaultGossipBeatEvery, Usage: "quiet heartbeats: a host puts one heartbeat in N on gossip where every peer serves heartbeat pulls, which fetch the others when late; 1 to 3, 1 = every heartbeat, as earlier versions; with --beat-requests only toward nodes that asked (agentd's default)"},
			&cli.BoolFlag{Name: flagSimBeatRequests, Value: true, Usage: "heartbeats on request (protocol v1.3): a host keeps heartbeats off gossip where every peer pulls them and could ask for them, and a node that cannot pull a host asks; false runs every node as protocol v1.2 (agentd's default)"},
			&cli.BoolFlag{Name: flagSimTrailingSyncs, Value: true, Usage: "trailing shard syncs (sync protocol 1.2.0): a node syncs each shard it joins once more a second after the first sync, and an author whose peers all do no longer announces a new agent a second time for peers that joined with it; false runs every node as before, with sync 1.1.0 (agentd's default)"},
			&cli.DurationFlag{Name: flagSimTimeout, Value: health.Timeout.D(), Usage: "silence after which every node removes an agent, and how long a provider must have been dead for an answer naming it to count as stale; at least --heartbeat-interval (agentd's default)"},
			&cli.Float64Flag{Name: flagSimLoss, Value: 0, Usage: "share of packets lost on every link, 0 to 0.5 (streams stay reliable: each loss costs a 200 ms+ retransmission timeout, as over TCP)"},
			&cli.StringFlag{Name: flagSimScope, Value: "interest", Usage: "what each node hears: interest (the agents of the capabilities it hosts, queries and watches, on their shard topics) or full (every agent, on the announce topic); the sybil scenario defaults to full, its worst case"},
			&cli.DurationFlag{Name: flagSimChurnInterval, Value: 10 * time.Second, Usage: "churn: time between churn events"},
			&cli.Float64Flag{Name: flagSimChurnFraction, Value: 0.1, Usage: "churn: fraction of the nodes that leave (and join) at each event"},
			&cli.DurationFlag{Name: flagSimPartitionFor, Value: 30 * time.Second, Usage: "partition: how long the halves stay apart (it starts at a quarter of the run)"},
			&cli.IntFlag{Name: flagSimMassJoin, Value: 50, Usage: "massjoin: fresh nodes that join at once (at a quarter of the run)"},
			&cli.IntFlag{Name: flagSimSybilAgents, Value: 10000, Usage: "sybil: fake agents the hostile peer announces"},
			&cli.Float64Flag{Name: flagSimSybilRate, Value: 500, Usage: "sybil: fake agents announced per second"},
			&cli.BoolFlag{Name: flagSimSybilFresh, Usage: "sybil: sign every fake with a peer key of its own (the attacker a per-peer quota cannot bound)"},
			&cli.Float64Flag{Name: flagSimQueryRate, Value: 20, Usage: "discover queries per second over the whole network"},
			&cli.IntFlag{Name: flagSimQueryInterest, Usage: "keep each node's queries to `K` capabilities of its own (drawn Zipf per node); 0 = every query draws from the whole catalog"},
			&cli.IntFlag{Name: flagSimCapabilities, Value: 60, Usage: "capabilities in the catalog (give it in proportion to --nodes for the same interest per node at every size)"},
			&cli.IntFlag{Name: flagSimSkills, Value: 40, Usage: "skills in the catalog, each offering 1-3 capabilities"},
			&cli.BoolFlag{Name: flagSimUniform, Usage: "draw skills, capabilities and queries uniformly instead of with Zipf popularity"},
			&cli.Float64Flag{Name: flagSimMinRecall, Value: 0.99, Usage: "fail (exit 1) when recall is below this"},
			&cli.Float64Flag{Name: flagSimMaxStale, Value: 0.01, Usage: "fail (exit 1) when the stale rate is above this"},
			&cli.StringFlag{Name: flagSimJSON, Usage: "write the report as JSON to `FILE`"},
			&cli.StringFlag{Name: flagSimSVG, Usage: "write the timeline plot (recall, stale rate, latency, events) to `FILE`"},
			&cli.BoolFlag{Name: flagSimQuiet, Usage: "no progress on stderr"},
			&cli.BoolFlag{Name: flagSimNodeLogs, Usage: "send the nodes' own logs to stderr at --log-level (very verbose)"},
			&cli.StringFlag{Name: flagSimCPUProfile, Usage: "write a CPU profile of the run to `FILE`"},
			&cli.StringFlag{Name: flagSimMemProfile, Usage: "write a heap profile taken at the end of the measured run, every node still up, to `FILE` (and a goroutine profile to FILE.goroutines)"},
		),
		Action:      runSimnet,
		Subcommands: []*cli.Command{simnetCurveCommand()},
	}
}

// simnetScenario maps the flags onto a scenario.
func simnetScenario(c *cli.Context) (simnet.Scenario, simnet.Thresholds, error) {
	var th simnet.Thresholds
	kind, err := simnet.ParseKind(c.String(flagSimScenario))
	if err != nil {
		return simnet.Scenario{}, th, usagef("--%s: %q is not one of churn, partition, massjoin, steady, sybil", flagSimScenario, c.String(flagSimScenario))
	}
	s := simnet.Scenario{
		Kind:            kind,
		Nodes:           c.Int(flagSimNodes),
		BootstrapNodes:  c.Int(flagSimBootstrap),
		Duration:        c.Duration(flagSimDuration),
		Seed:            c.Uint64(flagSimSeed),
		Latency:         c.Duration(flagSimLatency),
		Jitter:          c.Duration(flagSimJitter),
		Bandwidth:       c.Float64(flagSimBandwidth),
		ConnLow:         c.Int(flagSimConnLow),
		ConnHigh:        c.Int(flagSimConnHigh),
		ConnGrace:       c.Duration(flagSimConnGrace),
		Loss:            c.Float64(flagSimLoss),
		ChurnInterval:   c.Duration(flagSimChurnInterval),
		ChurnFraction:   c.Float64(flagSimChurnFraction),
		PartitionFor:    c.Duration(flagSimPartitionFor),
		MassJoin:        c.Int(flagSimMassJoin),
		SybilAgents:     c.Int(flagSimSybilAgents),
		SybilRate:       c.Float64(flagSimSybilRate),
		SybilFreshPeers: c.Bool(flagSimSybilFresh),
		QueryRate:       c.Float64(flagSimQueryRate),
		QueryInterest:   c.Int(flagSimQueryInterest),
		Capabilities:    c.Int(flagSimCapabilities),
		Skills:          c.Int(flagSimSkills),
		Uniform:         c.Bool(flagSimUniform),
	}
	// Zero means "the default" in node.Config; on the command line it
	// would mean no heartbeat at all, which no node can do.
	for _, f := range []string{flagSimHeartbeat, flagSimTimeout} {
		if d := c.Duration(f); d <= 0 {
			return s, th, usagef("--%s must be positive (got %s)", f, d)
		}
	}
	s.Node.HeartbeatInterval, s.Node.Timeout = c.Duration(flagSimHeartbeat), c.Duration(flagSimTimeout)
	if n := c.Int(flagSimGossipBeat); n < 1 || n > node.DefaultGossipBeatEvery {
		return s, th, usagef("--%s must be 1 to %d (got %d)", flagSimGossipBeat, node.DefaultGossipBeatEvery, n)
	}
	s.Node.GossipBeatEvery = c.Int(flagSimGossipBeat)
	s.Node.DisableBeatRequests = !c.Bool(flagSimBeatRequests)
	s.Node.DisableSyncTrail = !c.Bool(flagSimTrailingSyncs)
	switch sc := c.String(flagSimScope); {
	case !c.IsSet(flagSimScope):
		// The scenario's default: interest, full for sybil.
	case sc == node.ScopeInterest || sc == node.ScopeFull:
		s.Node.Scope = sc
	default:
		return simnet.Scenario{}, th, usagef("--%s: %q is not interest or full", flagSimScope, sc)
	}
	if c.IsSet(flagSimMeshDegree) || c.IsSet(flagSimFloodPublish) {
		p, err := gossip.MeshParams(c.Int(flagSimMeshDegree))
		if err != nil {
			return simnet.Scenario{}, th, usagef("--%s: %s", flagSimMeshDegree, strings.TrimPrefix(err.Error(), "gossip: "))
		}
		gc := gossip.DefaultConfig()
		gc.Params, gc.FloodPublish = p, c.Bool(flagSimFloodPublish)
		s.Node.Gossip = &gc
	}
	// Zero means "default" in a Scenario; on the command line it means zero.
	if s.Latency == 0 {
		s.NoLatency = true
	}
	switch {
	case !c.IsSet(flagSimJitter):
		s.Jitter = 0 // the scenario's default: the smaller of 5 ms and the latency
	case s.Jitter == 0:
		s.Jitter = -1
	}
	if kind == simnet.KindChurn && s.ChurnFraction <= 0 {
		return s, th, usagef("--%s must be positive for the churn scenario (use --%s steady for none)", flagSimChurnFraction, flagSimScenario)
	}
	if s.QueryRate <= 0 {
		return s, th, usagef("--%s must be positive: a run without queries measures nothing", flagSimQueryRate)
	}
	if clk := c.String(flagSimClock); clk != clockVirtual && clk != clockReal {
		return s, th, usagef("--%s: %q is not one of virtual, real", flagSimClock, clk)
	}
	th = simnet.Thresholds{MinRecall: c.Float64(flagSimMinRecall), MaxStale: c.Float64(flagSimMaxStale)}
	if th.MinRecall < 0 || th.MinRecall > 1 {
		return s, th, usagef("--%s must be between 0 and 1 (got %v)", flagSimMinRecall, th.MinRecall)
	}
	if th.MaxStale < 0 || th.MaxStale > 1 {
		return s, th, usagef("--%s must be between 0 and 1 (got %v)", flagSimMaxStale, th.MaxStale)
	}
	return s, th, nil
}

func runSimnet(c *cli.Context) error {
	if c.NArg() > 0 {
		return usagef("simnet takes no arguments (got %q)", c.Args().First())
	}
	s, th, err := simnetScenario(c)
	if err != nil {
		return err
	}
	// Validate before anything starts, so a bad flag is a usage error.
	if _, _, _, err := s.Plan(); err != nil {
		if errors.Is(err, simnet.ErrConfig) {
			return usagef("%s", strings.TrimPrefix(err.Error(), "simnet: invalid scenario: "))
		}
		return err
	}
	cfg, err := effectiveConfig(c)
	if err != nil {
		return err
	}
	stderr := c.App.ErrWriter
	quiet := c.Bool(flagSimQuiet)
	tty := !quiet && isTerminal(stderr)
	logCfg := cfg.Log
	if tty || quiet {
		// The bar owns the terminal line; only problems are logged.
		logCfg.Level = "warn"
	}
	virtual := c.String(flagSimClock) == clockVirtual
	logger := func(lc config.LogConfig) *slog.Logger {
		l := newLogger(stderr, lc)
		if virtual {
			// Inside the bubble time.Now is the simulated clock (it
			// starts in 2000): the lines carry the run's elapsed time.
			l = slog.New(untimed{l.Handler()})
		}
		return l
	}
	s.Logger = logger(logCfg)
	if c.Bool(flagSimNodeLogs) {
		s.NodeLogger = logger(cfg.Log)
	}
	var bar *progressBar
	switch {
	case tty:
		bar = &progressBar{w: stderr}
		s.Progress = bar.update
	case !quiet:
		s.Progress = progressLogger(logger(config.LogConfig{Level: "info", Format: cfg.Log.Format}))
	}

	stopProfile := func() {}
	if path := c.String(flagSimCPUProfile); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			return fmt.Errorf("cpu profile: %w", err)
		}
		stopProfile = sync.OnceFunc(func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				_, _ = fmt.Fprintf(stderr, "agentd simnet: cpu profile: %v\n", err)
			}
		})
		defer stopProfile()
	}
	var heapErr error
	if path := c.String(flagSimMemProfile); path != "" {
		s.AtEnd = func() { heapErr = writeHeapProfile(path) }
	}
	if os.Getenv("GOGC") == "" {
		gogc := simnetGOGC
		if !virtual {
			gogc = simnetGOGCReal
		}
		defer debug.SetGCPercent(debug.SetGCPercent(gogc))
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		// A large run collects harder as it nears the machine's memory
		// instead of being killed by it.
		if ram := physicalMemory(); ram > 0 {
			defer debug.SetMemoryLimit(debug.SetMemoryLimit(int64(float64(ram) * simnetMemoryShare)))
		}
	}
	began := time.Now()
	finish := func(rep *simnet.Report, runErr error) error {
		stopProfile()
		if bar != nil {
			bar.finish()
		}
		if rep == nil {
			return runErr
		}
		if heapErr != nil {
			return heapErr
		}
		rep.Clock = c.String(flagSimClock)
		return reportSimnet(c, rep, runErr, th, began)
	}
	if virtual {
		runVirtual(c.Context, s.Run, func(rep *simnet.Report, runErr error) int {
			return exitCode(finish(rep, runErr), stderr)
		})
	}
	return finish(s.Run(c.Context))
}

// reportSimnet writes the report of a finished run and says whether it
// passed.
func reportSimnet(c *cli.Context, rep *simnet.Report, runErr error, th simnet.Thresholds, began time.Time) error {
	stderr := c.App.ErrWriter
	rep.Command = simnetCommandLine(c)
	rep.WallSeconds = time.Since(began).Seconds()
	failures := rep.Check(th)
	if runErr != nil && !errors.Is(runErr, simnet.ErrNodeOp) {
		// Node failures are in the report already (Check lists them).
		rep.Failures = append(rep.Failures, "the run failed: "+runErr.Error())
	}
	if path := c.String(flagSimJSON); path != "" {
		if err := writeFileWith(path, rep.WriteJSON); err != nil {
			return fmt.Errorf("--%s: %w", flagSimJSON, err)
		}
	}
	if path := c.String(flagSimSVG); path != "" {
		if err := writeFileWith(path, rep.WriteSVG); err != nil {
			return fmt.Errorf("--%s: %w", flagSimSVG, err)
		}
	}
	if err := rep.WriteText(c.App.Writer); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(c.App.Writer, "wall time: %s\n", time.Since(began).Round(time.Millisecond)); err != nil {
		return err
	}
	if len(failures) > 0 || runErr != nil {
		for _, f := range rep.Failures {
			_, _ = fmt.Fprintf(stderr, "agentd simnet: FAIL: %s\n", f)
		}
		return errReported
	}
	return nil
}

// simnetCommandLine reconstructs the command from the flags that were set.
func simnetCommandLine(c *cli.Context) string {
	parts := []string{programName, "simnet"}
	for _, f := range c.Command.Flags {
		name := f.Names()[0]
		if !c.IsSet(name) {
			continue
		}
		switch name {
		case flagSimJSON, flagSimSVG, flagSimCPUProfile, flagSimMemProfile, flagSimQuiet, flagSimNodeLogs:
			continue // where the output went does not change the run
		}
		parts = append(parts, fmt.Sprintf("--%s %v", name, c.Value(name)))
	}
	return strings.Join(parts, " ")
}

func writeFileWith(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// writeHeapProfile writes the heap profile to path and, beside it, the
// goroutine profile to path.goroutines: in a simulation of many nodes
// their stacks are a large share of the memory the heap profile does not
// show.
func writeHeapProfile(path string) error {
	runtime.GC()
	if err := writeFileWith(path, pprof.WriteHeapProfile); err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	if err := writeFileWith(path+".goroutines", func(w io.Writer) error { return pprof.Lookup("goroutine").WriteTo(w, 0) }); err != nil {
		return fmt.Errorf("goroutine profile: %w", err)
	}
	return nil
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progressBar draws one updating line on a terminal.
type progressBar struct {
	w    io.Writer
	mu   sync.Mutex
	used bool
}

func (b *progressBar) update(p simnet.Progress) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used = true
	if p.Phase == "warmup" {
		_, _ = fmt.Fprintf(b.w, "\r\033[Kwarm-up: %d of %d nodes up; then waiting until every node sees every agent…", p.Live, p.Nodes)
		return
	}
	const width = 30
	frac := 0.0
	if p.Duration > 0 {
		frac = min(float64(p.Elapsed)/float64(p.Duration), 1)
	}
	n := int(frac * width)
	_, _ = fmt.Fprintf(b.w, "\r\033[K[%s%s] %s/%s  live %d  queries %d  recall %.2f%%  stale %.2f%%",
		strings.Repeat("#", n), strings.Repeat(".", width-n), p.Elapsed.Round(time.Second), p.Duration,
		p.Live, p.Queries, 100*p.Recall, 100*p.Stale)
}

func (b *progressBar) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used {
		_, _ = fmt.Fprintln(b.w)
	}
}

// progressLogger logs progress every 10 s of scenario time.
func progressLogger(log *slog.Logger) func(simnet.Progress) {
	var mu sync.Mutex
	last := time.Duration(-1)
	return func(p simnet.Progress) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case p.Phase == "warmup":
			log.Info("simnet warm-up: starting nodes", "up", p.Live, "nodes", p.Nodes)
			return
		case p.Phase == "run" && last >= 0 && p.Elapsed-last < 10*time.Second:
			return
		}
		last = p.Elapsed
		log.Info("simnet progress", "phase", p.Phase, "elapsed", p.Elapsed.Round(time.Second).String(), "live", p.Live,
			"queries", p.Queries, "recall", fmt.Sprintf("%.4f", p.Recall), "stale", fmt.Sprintf("%.4f", p.Stale))
	}
}

// Markers of the curve table in docs/simnet.md.
const (
	curveBegin = "<!-- simnet-curve:begin -->"
	curveEnd   = "<!-- simnet-curve:end -->"
)

func simnetCurveCommand() *cli.Command {
	return &cli.Command{
		Name:      "curve",
		Usage:     "turn simnet JSON reports of several sizes into a table and an SVG plot",
		ArgsUsage: "REPORT.json...",
		Description: "Reads reports written by `agentd simnet --json` (make simnet-curve runs them at\n" +
			"100, 250, 500 and 1000 nodes with the same interest per node) and writes, per size,\n" +
			"received messages and bytes per node per second, live heap per node, agents in a\n" +
			"view, shard topics, recall and crash-detection time: a Markdown table to stdout or\n" +
			"between the lines " + curveBegin + " and " + curveEnd + " of --md FILE, and a plot\n" +
			"to --svg FILE.",
		Flags: withGlobal(
			&cli.StringFlag{Name: "md", Usage: "Markdown `FILE` whose curve markers get the table (default: print it)"},
			&cli.StringFlag{Name: "svg", Usage: "write the plot to `FILE`"},
		),
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return usagef("give the JSON reports to plot")
			}
			rows, err := simnet.ReadReports(c.Args().Slice())
			if err != nil {
				return err
			}
			var table bytes.Buffer
			if err := simnet.WriteCurveTable(&table, rows); err != nil {
				return err
			}
			if md := c.String("md"); md != "" {
				doc, err := os.ReadFile(md)
				if err != nil {
					return err
				}
				out, err := simnet.ReplaceBetween(doc, curveBegin, curveEnd, table.Bytes())
				if err != nil {
					return fmt.Errorf("%s: %w", md, err)
				}
				if err := os.WriteFile(md, out, 0o644); err != nil {
					return err
				}
			} else if _, err := c.App.Writer.Write(table.Bytes()); err != nil {
				return err
			}
			if p := c.String("svg"); p != "" {
				var b bytes.Buffer
				if err := simnet.WriteCurveSVG(&b, rows); err != nil {
					return err
				}
				return os.WriteFile(p, b.Bytes(), 0o644)
			}
			return nil
		},
	}
}
