package simnet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd/agentd/bootstrap"
	"github.com/agentd/agentd/gossip"
	"github.com/agentd/agentd/internal/backoff"
	agentdmetrics "github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/node"
	"github.com/agentd/agentd/p2p"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
	"github.com/agentd/agentd/view"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
)

// ErrNodeOp is wrapped by the error Run returns when a node could not be
// started, restarted or stopped (the report lists each failure).
var ErrNodeOp = errors.New("simnet: node operation failed")

type nodeState int

const (
	stateDown     nodeState = iota // not running: new, or departed and restartable
	stateStarting                  // being started
	stateUp                        // running; its agent is live
	stateStopping                  // leaving or crashing
	stateRetired                   // store and host closed; never restarts
)

// vnode is one virtual node. The fields under "guarded" belong to sim.mu.
type vnode struct {
	idx    int
	boot   bool
	id     *trust.Identity
	raw    host.Host // the current instance's host (nil while down; guarded by sim.mu)
	tr     *traffic
	skills []CatalogSkill
	shards map[string]bool // the shards of its agent's capabilities
	asks   []string        // its query interest (Scenario.QueryInterest)

	// guarded by sim.mu
	st      store.Store
	snap    []byte   // while down: the store's snapshot (store.Snapshot), so a stopped node holds no open store
	sh      *simHost // the current instance's view of the host
	state   nodeState
	n       *node.Node
	bn      *bootstrap.Node
	epoch   int // incremented when the node stops
	upSince time.Time
	// gated is the node's count of message copies its gossip dropped
	// before validation (gossip.Gossip.CopiesDropped) when the measured
	// window opened (0 for an instance started in it).
	gated uint64
}

// pending is a departure or join whose effect on the views is awaited.
type pending struct {
	kind    string // "crash", "leave", "join"
	agent   string
	at      time.Time
	waiting []watchNode // nil: every agent node up at the check
	// survivorsDone: a departure has left the views of the nodes that were
	// up when it happened; it is then awaited at every live node.
	survivorsDone bool
}

type watchNode struct {
	vn    *vnode
	epoch int
}

// reconvergeWatch waits for complete views after a heal or a mass join.
type reconvergeWatch struct {
	event EventKind
	at    time.Time
	// joiners must all have started (or failed) before views can count
	// as complete.
	joiners []*vnode
}

type bucketAcc struct {
	out     Outcome
	queries int
	lat     *samples
	sampled bool
	live    int
	msgs    float64
	bytes   float64
	heapMB  float64
}

// sim is one run of a scenario.
type sim struct {
	s     Scenario
	cat   *Catalog
	sched *Schedule
	log   *slog.Logger
	net   *simNet
	truth *truth
	probe *probe
	ctx   context.Context
	ops   sync.WaitGroup // node operations and queries
	// watchers read each node's deregistration events; they end when the
	// node's view closes.
	watchers sync.WaitGroup
	qsem     chan struct{}

	mu        sync.Mutex
	nodes     []*vnode
	boots     []peer.AddrInfo
	departed  []int
	measuring bool
	t0, tEnd  time.Time
	traffic0  trafficTotals // agent nodes' totals at t0
	boot0     trafficTotals
	mix       mixTotals // the measured window's pubsub receptions
	gated     uint64    // copies dropped before validation in the window
	nodeSecs  float64
	opErrs    []string
	closeErrs []string
	closeErrN int

	q          QueryStats
	recallSum  float64
	fullRecall int
	lat        *samples
	latBy      map[string]*samples
	buckets    []*bucketAcc
	marks      []Mark
	pend       []*pending
	shardsOf   map[string]map[string]bool // agent id → its shards
	interestAt InterestStats              // at the end of the run
	watches    []reconvergeWatch
	crashGone  *samples
	leaveGone  *samples
	// …All: gone from every live node, later joiners included.
	crashGoneAll *samples
	leaveGoneAll *samples
	joinSeen     *samples
	staleDead    *samples
	staleBy      map[string]int
	staleLate    int
	churn        ChurnStats
	res          Resources
	goroSum      float64
	heapSum      float64
	stackSum     float64
	conns        connSums // per agent node, summed over samples
	lastSample   trafficTotals
	lastSampleAt time.Time
	sybil        *sybilRun // KindSybil's hostile peer, once it has joined
}

// Run runs the scenario and returns its report. The run is complete and
// every node, store and goroutine it started is gone when Run returns. It
// returns an error wrapping ErrConfig for an invalid scenario, ErrNodeOp
// (with the report) when a node operation failed, and ctx's error (with
// the partial report, Interrupted set) when ctx ends first.
func (s Scenario) Run(ctx context.Context) (*Report, error) {
	s, cat, sched, err := s.Plan()
	if err != nil {
		return nil, err
	}
	sm := &sim{
		s: s, cat: cat, sched: sched, log: s.Logger,
		net:   newSimNet(s),
		truth: newTruth(s.StaleAfter),
		probe: newProbe(1<<18, uint32(s.Nodes/25)),
		ctx:   ctx,
		qsem:  make(chan struct{}, s.QueryConcurrency),
		lat:   newSamples(1 << 16), latBy: map[string]*samples{},
		crashGone: newSamples(1 << 14), leaveGone: newSamples(1 << 14), joinSeen: newSamples(1 << 14),
		crashGoneAll: newSamples(1 << 14), leaveGoneAll: newSamples(1 << 14),
		staleDead: newSamples(1 << 14), staleBy: map[string]int{},
		q: QueryStats{Errors: map[string]int{}},
	}
	nb := int((s.Duration + s.SampleInterval - 1) / s.SampleInterval)
	for range nb {
		sm.buckets = append(sm.buckets, &bucketAcc{lat: newSamples(1 << 12)})
	}
	return sm.run(ctx)
}

func (sm *sim) run(ctx context.Context) (rep *Report, err error) {
	began := time.Now()
	cpu0 := cpuSeconds()
	sm.probe.start()
	defer func() {
		if terr := sm.teardown(); terr != nil && err == nil {
			err = terr
		}
	}()
	if err := sm.startBootstraps(); err != nil {
		return nil, err
	}
	setup, err := sm.warmup(ctx)
	if err != nil {
		return nil, err
	}
	interrupted, runCPU := sm.runSchedule(ctx)
	if sm.s.AtEnd != nil {
		sm.s.AtEnd()
	}
	rep = sm.report(setup)
	rep.Interrupted = interrupted
	rep.Resources.CPUSeconds = cpuSeconds() - cpu0
	rep.Resources.RunCPUSeconds = runCPU
	rep.Resources.ElapsedS = time.Since(began).Seconds()
	switch {
	case interrupted:
		return rep, ctx.Err()
	case len(sm.opErrs) > 0:
		return rep, fmt.Errorf("%w: %d failures, first: %s", ErrNodeOp, len(sm.opErrs), sm.opErrs[0])
	}
	return rep, nil
}

// ---- nodes ----

// newVnode creates node idx = len(nodes): identity, host, skills. Only the
// goroutine driving the run calls it, so indices follow the schedule.
func (sm *sim) newVnode(boot bool) (*vnode, error) {
	sm.mu.Lock()
	idx := len(sm.nodes)
	sm.mu.Unlock()
	id, err := identityFor(sm.s.Seed, idx)
	if err != nil {
		return nil, fmt.Errorf("identity of node %d: %w", idx, err)
	}
	h, err := sm.net.host(idx, id)
	if err != nil {
		return nil, err
	}
	vn := &vnode{idx: idx, boot: boot, id: id, raw: h, tr: &traffic{}}
	if !boot {
		vn.skills = sm.cat.pickSkills(newRand(sm.s.Seed, streamSpec, uint64(idx)))
		vn.shards = agentShards(idx, vn.skills)
		if sm.s.QueryInterest > 0 {
			vn.asks = sm.cat.pickInterest(newRand(sm.s.Seed, streamInterest, uint64(idx)), sm.s.QueryInterest, sm.s.Zipf)
		}
	}
	sm.mu.Lock()
	if sm.shardsOf == nil {
		sm.shardsOf = map[string]map[string]bool{}
	}
	sm.shardsOf[id.AgentID] = vn.shards
	sm.nodes = append(sm.nodes, vn)
	sm.mu.Unlock()
	return vn, nil
}

func (sm *sim) startBootstraps() error {
	for range sm.s.BootstrapNodes {
		vn, err := sm.newVnode(true)
		if err != nil {
			return err
		}
		sh, err := sm.attachHost(vn)
		if err != nil {
			return err
		}
		sm.mu.Lock()
		peers := slices.Clone(sm.boots)
		sm.mu.Unlock()
		bn, err := bootstrap.StartNode(sm.ctx, sh, bootstrap.NodeConfig{DHT: sm.s.Node.DHT, Peers: peers, Metrics: agentdmetrics.New(false)}, sm.s.NodeLogger.With("node", vn.idx))
		if err != nil {
			return fmt.Errorf("bootstrap node %d: %w", vn.idx, err)
		}
		sm.mu.Lock()
		vn.bn, vn.state, vn.upSince = bn, stateUp, time.Now()
		sm.boots = append(sm.boots, peer.AddrInfo{ID: vn.raw.ID(), Addrs: vn.raw.Addrs()})
		sm.mu.Unlock()
	}
	return nil
}

// start starts an agent node (a fresh one, or a restart with its identity
// and store) and, once its agent is registered, records it live.
func (sm *sim) start(vn *vnode, restart bool) error {
	sm.mu.Lock()
	st, snap := vn.st, vn.snap
	vn.snap = nil
	boots := slices.Clone(sm.boots)
	sm.mu.Unlock()
	if st == nil {
		var err error
		o := store.Options{CacheTTL: sm.s.Node.CacheTTL, Logger: sm.s.NodeLogger}
		if snap != nil {
			o.Restore = bytes.NewReader(snap)
		}
		st, err = store.Open(o)
		if err != nil {
			return fmt.Errorf("open store of node %d: %w", vn.idx, err)
		}
		sm.mu.Lock()
		vn.st = st
		sm.mu.Unlock()
	}
	sh, err := sm.attachHost(vn)
	if err != nil {
		return err
	}
	cfg := sm.s.Node
	cfg.Bootstrap = boots
	gc := gossip.DefaultConfig()
	if sm.s.Node.Gossip != nil {
		gc = *sm.s.Node.Gossip
	}
	gc.Tracers = append(slices.Clip(gc.Tracers), sm.probe.tracer(sh.ID()))
	cfg.Gossip = &gc
	n, err := node.New(cfg, node.Options{
		Identity: vn.id, Host: sh, Store: st, Metrics: agentdmetrics.New(false),
		Logger: sm.s.NodeLogger.With("node", vn.idx),
	})
	if err != nil {
		return errors.Join(fmt.Errorf("node %d: %w", vn.idx, err), sm.detachHost(vn))
	}
	fail := func(err error) error {
		return errors.Join(err, n.Close(), sm.detachHost(vn))
	}
	if err := n.Start(sm.ctx); err != nil {
		return fail(fmt.Errorf("start node %d: %w", vn.idx, err))
	}
	if restart {
		if !slices.ContainsFunc(n.Locals(), func(sa *record.SignedAgent) bool { return sa.Agent.AgentID == vn.id.AgentID }) {
			return fail(fmt.Errorf("node %d restarted without its registration", vn.idx))
		}
	} else if _, err := n.Register(sm.ctx, agentSpec(vn.idx, vn.skills)); err != nil {
		return fail(fmt.Errorf("register the agent of node %d: %w", vn.idx, err))
	}
	sub := n.Subscribe(view.Filter{Types: []view.EventType{view.EventDeregistered}}, 256)
	sm.watchers.Go(func() {
		for ev := range sub.C() {
			sm.noteRemoval(ev)
		}
	})
	now := time.Now()
	sm.mu.Lock()
	defer sm.mu.Unlock()
	vn.n, vn.state, vn.upSince, vn.gated = n, stateUp, now, 0
	// The truth changes before the poller can see the pending join.
	sm.truth.up(vn.id.AgentID, vn.idx, vn.skills, now)
	if sm.measuring && sm.tEnd.IsZero() {
		sm.pend = append(sm.pend, &pending{kind: "join", agent: vn.id.AgentID, at: now, waiting: sm.upAgentsLocked(vn.idx)})
	}
	return nil
}

// noteRemoval counts an agent dropped from a view by the liveness clock
// or by failure detection, and whether its node was up then.
func (sm *sim) noteRemoval(ev view.Event) {
	if ev.Reason != view.ReasonTimeout && ev.Reason != view.ReasonPeerDown {
		return
	}
	live := sm.truth.isLive(ev.AgentID, ev.Time)
	sm.mu.Lock()
	defer sm.mu.Unlock()
	if !sm.measuring || !sm.tEnd.IsZero() {
		return
	}
	if sm.churn.Removals == nil {
		sm.churn.Removals, sm.churn.FalseRemovals = map[string]int{}, map[string]int{}
	}
	sm.churn.Removals[ev.Reason]++
	if live {
		sm.churn.FalseRemovals[ev.Reason]++
	}
}

// stop takes an agent node down: a graceful Shutdown (unregister, then
// close) followed by unlinking, or a crash (unlink first, then close, so
// nothing leaves the node).
func (sm *sim) stop(vn *vnode, n *node.Node, crash bool) error {
	var err error
	if crash {
		sm.net.detach(vn.idx)
		err = errors.Join(n.Close(), sm.detachHost(vn))
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = n.Shutdown(ctx)
		cancel()
		err = errors.Join(err, sm.detachHost(vn))
	}
	// What a stopped process leaves behind is its disk: the store is kept
	// as a snapshot and the host (peerstore, connections) goes.
	err = errors.Join(err, sm.shelve(vn))
	now := time.Now()
	var retire []*vnode
	sm.mu.Lock()
	sm.addUptimeLocked(vn, now)
	sm.addGatedLocked(vn, n)
	vn.n, vn.state = nil, stateDown
	sm.departed = append(sm.departed, vn.idx)
	// Keep at most Nodes departed nodes restartable; older ones retire.
	for len(sm.departed) > sm.s.Nodes {
		old := sm.nodes[sm.departed[0]]
		sm.departed = sm.departed[1:]
		old.state = stateRetired
		retire = append(retire, old)
	}
	sm.mu.Unlock()
	for _, old := range retire {
		err = errors.Join(err, sm.retire(old))
	}
	if err != nil {
		return fmt.Errorf("stop node %d: %w", vn.idx, err)
	}
	return nil
}

// shelve snapshots and closes the store of a stopped node and closes its
// host; start restores both.
func (sm *sim) shelve(vn *vnode) error {
	sm.mu.Lock()
	st, h := vn.st, vn.raw
	vn.st, vn.raw = nil, nil
	sm.mu.Unlock()
	var err error
	if st != nil {
		var buf bytes.Buffer
		err = store.Snapshot(st, &buf)
		err = errors.Join(err, st.Close())
		sm.mu.Lock()
		vn.snap = buf.Bytes()
		sm.mu.Unlock()
	}
	if h != nil {
		err = errors.Join(err, sm.net.dropHost(vn.idx))
	}
	return err
}

func (sm *sim) retire(vn *vnode) error {
	sm.mu.Lock()
	st := vn.st
	vn.st, vn.snap = nil, nil
	sm.mu.Unlock()
	var err error
	if st != nil {
		err = st.Close()
	}
	return errors.Join(err, sm.net.dropHost(vn.idx))
}

// attachHost links vn's host into the network and gives the new node
// instance its view of the host, with a fresh connection manager.
func (sm *sim) attachHost(vn *vnode) (*simHost, error) {
	h, err := sm.net.host(vn.idx, vn.id)
	if err != nil {
		return nil, err
	}
	cm, err := p2p.ConnManager(sm.s.ConnLow, sm.s.ConnHigh, sm.s.ConnGrace)
	if err != nil {
		return nil, fmt.Errorf("connection manager of node %d: %w", vn.idx, err)
	}
	h.Network().Notify(cm.Notifee())
	sh := &simHost{Host: h, idx: vn.idx, t: vn.tr, net: sm.net, cm: cm}
	sm.mu.Lock()
	vn.raw, vn.sh = h, sh
	sm.mu.Unlock()
	if err := sm.net.attach(vn.idx); err != nil {
		return nil, errors.Join(err, sm.detachHost(vn))
	}
	return sh, nil
}

// detachHost unlinks vn's host and closes the instance's connection
// manager.
func (sm *sim) detachHost(vn *vnode) error {
	sm.net.detach(vn.idx)
	sm.mu.Lock()
	sh := vn.sh
	vn.sh = nil
	sm.mu.Unlock()
	if sh == nil {
		return nil
	}
	sh.Host.Network().StopNotify(sh.cm.Notifee())
	return sh.cm.Close()
}

// addGatedLocked adds the copies n's gossip dropped before validation
// inside the measured window.
func (sm *sim) addGatedLocked(vn *vnode, n *node.Node) {
	if !sm.measuring || !sm.tEnd.IsZero() || n == nil || n.Gossip() == nil {
		return
	}
	sm.gated += n.Gossip().CopiesDropped() - vn.gated
}

// addUptimeLocked adds vn's uptime inside the measured window.
func (sm *sim) addUptimeLocked(vn *vnode, now time.Time) {
	if !sm.measuring || vn.upSince.IsZero() {
		return
	}
	from := vn.upSince
	if from.Before(sm.t0) {
		from = sm.t0
	}
	to := now
	if !sm.tEnd.IsZero() && to.After(sm.tEnd) {
		to = sm.tEnd
	}
	if to.After(from) {
		sm.nodeSecs += to.Sub(from).Seconds()
	}
}

// upAgentsLocked returns the up agent nodes other than except, in index
// order, with their epochs.
func (sm *sim) upAgentsLocked(except int) []watchNode {
	var out []watchNode
	for _, vn := range sm.nodes {
		if !vn.boot && vn.state == stateUp && vn.idx != except {
			out = append(out, watchNode{vn, vn.epoch})
		}
	}
	return out
}

func (sm *sim) opFailed(err error) {
	sm.log.Error("node operation failed", "err", err)
	sm.mu.Lock()
	defer sm.mu.Unlock()
	if len(sm.opErrs) < 20 {
		sm.opErrs = append(sm.opErrs, err.Error())
	}
}

// closeFailed records an error a node returned while it stopped. The node
// is gone either way, so the run goes on; the report lists the errors.
func (sm *sim) closeFailed(err error) {
	sm.log.Warn("node stopped with an error", "err", err)
	sm.mu.Lock()
	defer sm.mu.Unlock()
	sm.closeErrN++
	if len(sm.closeErrs) < 5 {
		sm.closeErrs = append(sm.closeErrs, err.Error())
	}
}

// goOp runs f as a tracked operation.
func (sm *sim) goOp(f func() error) {
	sm.ops.Add(1)
	go func() {
		defer sm.ops.Done()
		if err := f(); err != nil {
			sm.opFailed(err)
		}
	}()
}

// ---- warm-up ----

func (sm *sim) warmup(ctx context.Context) (SetupInfo, error) {
	begin := time.Now()
	sm.progress("warmup", 0)
	sem := make(chan struct{}, sm.s.StartConcurrency)
	var (
		wg      sync.WaitGroup
		errMu   sync.Mutex
		errs    []error
		started atomic.Int64
	)
	// Progress at every tenth of the nodes (a 1 000-node warm-up takes
	// many minutes of wall time).
	step := int64(max(sm.s.StartConcurrency, sm.s.Nodes/10))
	for range sm.s.Nodes {
		vn, err := sm.newVnode(false)
		if err != nil {
			wg.Wait()
			return SetupInfo{}, err
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return SetupInfo{}, ctx.Err()
		}
		sm.mu.Lock()
		vn.state = stateStarting
		sm.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := sm.start(vn, false); err != nil {
				sm.mu.Lock()
				vn.state = stateDown
				sm.mu.Unlock()
				errMu.Lock()
				errs = append(errs, err)
				errMu.Unlock()
				return
			}
			if k := started.Add(1); k%step == 0 {
				sm.progress("warmup", 0)
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return SetupInfo{}, fmt.Errorf("%w: %d of %d nodes failed to start: %w", ErrNodeOp, len(errs), sm.s.Nodes, errs[0])
	}
	info := SetupInfo{StartS: time.Since(begin).Seconds()}
	sm.log.Info("nodes started", "nodes", sm.s.Nodes, "seconds", info.StartS)
	// The wait for convergence starts once every node is up (starting
	// 1 000 nodes takes longer than the whole wait).
	deadline := time.Now().Add(sm.s.WarmupTimeout)
	for {
		if sm.converged() {
			info.Converged, info.ConvergedS = true, time.Since(begin).Seconds()
			break
		}
		if !time.Now().Before(deadline) {
			sm.log.Warn("warm-up timed out before every node saw every agent", "timeout", sm.s.WarmupTimeout)
			break
		}
		if !backoff.Sleep(ctx, 250*time.Millisecond) {
			return info, ctx.Err()
		}
	}
	return info, nil
}

// converged reports whether every up agent node sees every live agent it
// is interested in (every one, for a node of full scope).
func (sm *sim) converged() bool {
	sm.mu.Lock()
	ups := sm.upAgentsLocked(-1)
	sm.mu.Unlock()
	for _, w := range ups {
		n := sm.nodeOf(w)
		if n == nil {
			continue
		}
		v := n.View()
		joined := joinedShards(n)
		for _, a := range ups {
			if !interested(joined, a.vn.shards) {
				continue
			}
			if _, ok := v.Get(a.vn.id.AgentID); !ok {
				return false
			}
		}
	}
	return true
}

// joinedShards returns the shards a node listens to; nil means every
// agent (a node of full scope).
func joinedShards(n *node.Node) map[string]bool {
	if !n.Scoped() {
		return nil
	}
	out := map[string]bool{}
	for _, sh := range n.Gossip().Shards() {
		out[sh] = true
	}
	return out
}

// interested reports whether a node listening to joined (nil: everything)
// hears an agent with the given shards.
func interested(joined, shards map[string]bool) bool {
	if joined == nil {
		return true
	}
	for sh := range shards {
		if joined[sh] {
			return true
		}
	}
	return false
}

// nodeOf returns w's node if it is still up in the same epoch.
func (sm *sim) nodeOf(w watchNode) *node.Node {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	if w.vn.state != stateUp || w.vn.epoch != w.epoch {
		return nil
	}
	return w.vn.n
}

// ---- the measured run ----

func (sm *sim) runSchedule(ctx context.Context) (interrupted bool, cpu float64) {
	t0 := time.Now()
	sm.mu.Lock()
	sm.t0, sm.measuring = t0, true
	sm.traffic0, sm.boot0 = sm.trafficLocked()
	for _, vn := range sm.nodes {
		if vn.n != nil && vn.n.Gossip() != nil {
			vn.gated = vn.n.Gossip().CopiesDropped()
		}
	}
	sm.lastSample, sm.lastSampleAt = sm.traffic0, t0
	sm.mu.Unlock()
	mix0 := sm.probe.mix.read()
	sm.probe.measureFrom(t0)
	cpu0 := cpuSeconds()

	bgCtx, stopBG := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	bg.Add(3)
	go func() { defer bg.Done(); sm.sampler(bgCtx) }()
	go func() { defer bg.Done(); sm.poller(bgCtx) }()
	go func() { defer bg.Done(); sm.progressLoop(bgCtx) }()

	for i, ev := range sm.sched.Events {
		if !sleepUntil(ctx, t0.Add(ev.At)) {
			interrupted = true
			break
		}
		sm.dispatch(i, ev)
	}
	if !interrupted && !sleepUntil(ctx, t0.Add(sm.s.Duration)) {
		interrupted = true
	}
	end := time.Now()
	sm.mu.Lock()
	for _, vn := range sm.nodes {
		if !vn.boot && vn.state == stateUp {
			sm.addUptimeLocked(vn, end)
			sm.addGatedLocked(vn, vn.n)
		}
	}
	sm.tEnd = end
	// Uptime is now counted to tEnd; nodes stopping later add nothing.
	var ups []*node.Node
	for _, vn := range sm.nodes {
		if !vn.boot && vn.state == stateUp && vn.n != nil {
			ups = append(ups, vn.n)
		}
	}
	sm.mu.Unlock()
	sm.interestAt = interestOf(ups)
	cpu = cpuSeconds() - cpu0
	sm.sampleAt(end)
	agents, boots := sm.trafficAt()
	sm.mix = sm.probe.mix.read().sub(mix0)
	// Let queries and node operations in flight finish (lookups are
	// bounded by the node's LookupTimeout); the poller keeps resolving
	// departures meanwhile.
	sm.ops.Wait()
	sm.pollOnce(time.Now())
	stopBG()
	bg.Wait()
	sm.mu.Lock()
	sm.traffic0 = agents.sub(sm.traffic0)
	sm.boot0 = boots.sub(sm.boot0)
	sm.mu.Unlock()
	sm.progress("done", sm.s.Duration)
	return interrupted, cpu
}

func (sm *sim) trafficAt() (agents, boots trafficTotals) {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	return sm.trafficLocked()
}

func (sm *sim) trafficLocked() (agents, boots trafficTotals) {
	for _, vn := range sm.nodes {
		if vn.boot {
			boots.add(vn.tr.snapshot())
		} else {
			agents.add(vn.tr.snapshot())
		}
	}
	return agents, boots
}

func (sm *sim) dispatch(i int, ev Event) {
	switch ev.Kind {
	case EventQuery:
		sm.query(ev)
	case EventChurn:
		sm.doChurn(ev)
	case EventPartition:
		sm.doPartition(ev)
	case EventHeal:
		sm.doHeal(ev)
	case EventMassJoin:
		sm.doMassJoin(ev)
	case EventSybil:
		sm.doSybil(ev)
	default:
		sm.opFailed(fmt.Errorf("event %d: unknown kind %q", i, ev.Kind))
	}
}

func (sm *sim) mark(kind EventKind, at time.Time, detail string) {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	sm.marks = append(sm.marks, Mark{AtS: at.Sub(sm.t0).Seconds(), Kind: kind, Detail: detail})
}

func (sm *sim) doChurn(ev Event) {
	r := rand.New(rand.NewPCG(ev.Rand, 0))
	now := time.Now()
	type leaver struct {
		vn    *vnode
		n     *node.Node
		crash bool
	}
	var leavers []leaver
	var restarts []*vnode
	sm.mu.Lock()
	var ups []*vnode
	for _, vn := range sm.nodes {
		if !vn.boot && vn.state == stateUp {
			ups = append(ups, vn)
		}
	}
	r.Shuffle(len(ups), func(i, j int) { ups[i], ups[j] = ups[j], ups[i] })
	k := min(ev.Leave+ev.Crash, len(ups))
	for i, vn := range ups[:k] {
		// The first Crash of the drawn nodes crash, the rest leave.
		leavers = append(leavers, leaver{vn, vn.n, i < ev.Crash})
		vn.state = stateStopping
		vn.epoch++
		sm.addUptimeLocked(vn, now)
		vn.upSince = time.Time{}
	}
	pool := slices.Clone(sm.departed)
	slices.Sort(pool)
	r.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	for _, idx := range pool[:min(ev.Restart, len(pool))] {
		vn := sm.nodes[idx]
		vn.state = stateStarting
		restarts = append(restarts, vn)
		sm.departed = slices.DeleteFunc(sm.departed, func(x int) bool { return x == idx })
	}
	fresh := ev.Fresh + ev.Restart - len(restarts)
	for _, l := range leavers {
		kind := "leave"
		if l.crash {
			kind = "crash"
			sm.churn.Crashed++
		} else {
			sm.churn.Left++
		}
		// The truth changes before the poller can see the pending departure.
		sm.truth.down(l.vn.id.AgentID, now)
		// Departures wait first on the nodes up now, then on every node up
		// at each check, including nodes that join later and may learn the
		// dead agent from others.
		sm.pend = append(sm.pend, &pending{kind: kind, agent: l.vn.id.AgentID, at: now, waiting: sm.upAgentsLocked(l.vn.idx)})
	}
	sm.churn.Restarted += len(restarts)
	sm.churn.Joined += fresh
	sm.mu.Unlock()

	for _, l := range leavers {
		sm.ops.Add(1)
		go func() {
			defer sm.ops.Done()
			if err := sm.stop(l.vn, l.n, l.crash); err != nil {
				sm.closeFailed(err)
			}
		}()
	}
	for _, vn := range restarts {
		sm.goOp(func() error { return sm.startOrRelease(vn, true) })
	}
	sm.startFresh(fresh)
	var crashed int
	for _, l := range leavers {
		if l.crash {
			crashed++
		}
	}
	sm.mark(EventChurn, now, fmt.Sprintf("%d left, %d crashed, %d restarted, %d joined", len(leavers)-crashed, crashed, len(restarts), fresh))
}

// startOrRelease starts vn and, when that fails, returns it to the pool.
func (sm *sim) startOrRelease(vn *vnode, restart bool) error {
	err := sm.start(vn, restart)
	if err != nil {
		sm.mu.Lock()
		vn.state = stateDown
		if restart {
			sm.departed = append(sm.departed, vn.idx)
		}
		sm.mu.Unlock()
	}
	return err
}

// startFresh creates k fresh nodes and starts them concurrently.
func (sm *sim) startFresh(k int) []*vnode {
	var out []*vnode
	for range k {
		vn, err := sm.newVnode(false)
		if err != nil {
			sm.opFailed(err)
			continue
		}
		out = append(out, vn)
		sm.mu.Lock()
		vn.state = stateStarting
		sm.mu.Unlock()
		sm.goOp(func() error { return sm.startOrRelease(vn, false) })
	}
	return out
}

func (sm *sim) doPartition(ev Event) {
	r := rand.New(rand.NewPCG(ev.Rand, 1))
	side := map[int]int{}
	sm.mu.Lock()
	var boots, agents []int
	for _, vn := range sm.nodes {
		if vn.boot {
			boots = append(boots, vn.idx)
		} else {
			agents = append(agents, vn.idx)
		}
	}
	sm.mu.Unlock()
	r.Shuffle(len(boots), func(i, j int) { boots[i], boots[j] = boots[j], boots[i] })
	r.Shuffle(len(agents), func(i, j int) { agents[i], agents[j] = agents[j], agents[i] })
	for i, idx := range boots {
		side[idx] = i % 2
	}
	for i, idx := range agents {
		if i >= len(agents)/2 {
			side[idx] = 1
		}
	}
	now := time.Now()
	sm.truth.partition(now, side)
	sm.net.split(side)
	sm.mark(EventPartition, now, fmt.Sprintf("%d | %d agent nodes", len(agents)/2, len(agents)-len(agents)/2))
}

func (sm *sim) doHeal(Event) {
	now := time.Now()
	if err := sm.net.heal(); err != nil {
		sm.opFailed(err)
	}
	sm.truth.heal(now)
	sm.mark(EventHeal, now, "")
	sm.mu.Lock()
	sm.watches = append(sm.watches, reconvergeWatch{event: EventHeal, at: now})
	sm.mu.Unlock()
}

func (sm *sim) doMassJoin(ev Event) {
	now := time.Now()
	sm.mu.Lock()
	sm.churn.Joined += ev.Fresh
	sm.mu.Unlock()
	joiners := sm.startFresh(ev.Fresh)
	sm.mark(EventMassJoin, now, fmt.Sprintf("%d nodes", ev.Fresh))
	sm.mu.Lock()
	sm.watches = append(sm.watches, reconvergeWatch{event: EventMassJoin, at: now, joiners: joiners})
	sm.mu.Unlock()
}

// ---- queries ----

func (sm *sim) query(ev Event) {
	sm.mu.Lock()
	sm.q.Scheduled++
	var ups []*vnode
	for _, vn := range sm.nodes {
		if !vn.boot && vn.state == stateUp {
			ups = append(ups, vn)
		}
	}
	if len(ups) == 0 {
		sm.q.Skipped++
		sm.mu.Unlock()
		return
	}
	select {
	case sm.qsem <- struct{}{}:
	default:
		sm.q.Skipped++
		sm.mu.Unlock()
		return
	}
	vn := ups[ev.Rand%uint64(len(ups))]
	w := watchNode{vn, vn.epoch}
	n, upSince := vn.n, vn.upSince
	sm.q.Issued++
	sm.mu.Unlock()
	q := *ev.Query
	if len(vn.asks) > 0 {
		q = Query{Capability: vn.asks[(ev.Rand>>32)%uint64(len(vn.asks))]}
	}
	sm.ops.Add(1)
	go func() {
		defer sm.ops.Done()
		defer func() { <-sm.qsem }()
		start := time.Now()
		res, err := n.Discover(sm.ctx, node.Query{Filter: store.Filter{Skill: q.Skill, Capability: q.Capability}})
		lat := time.Since(start)
		if sm.nodeOf(w) == nil {
			sm.mu.Lock()
			sm.q.Aborted++
			sm.mu.Unlock()
			return
		}
		src := "none"
		var ret []Returned
		for _, r := range res {
			ret = append(ret, Returned{AgentID: r.Agent.AgentID, Source: string(r.Source), Stale: r.Stale})
		}
		if len(res) > 0 {
			src = string(res[0].Source)
		}
		o, hits := sm.truth.score(q, vn.idx, start, ret)
		sm.recordQuery(start, upSince, lat, src, o, hits, err)
		sm.mu.Lock()
		sr := sm.sybil
		sm.mu.Unlock()
		if sr != nil && q.Capability != "" {
			sr.checkAnswer(n, q.Capability)
		}
	}()
}

func (sm *sim) recordQuery(start, querierUp time.Time, lat time.Duration, src string, o Outcome, hits []staleHit, err error) {
	sm.lat.add(lat)
	for _, h := range hits {
		sm.staleDead.add(h.deadFor)
	}
	sm.mu.Lock()
	defer sm.mu.Unlock()
	for _, h := range hits {
		sm.staleBy[h.source]++
		if querierUp.After(start.Add(-h.deadFor)) {
			sm.staleLate++
		}
	}
	s := sm.latBy[src]
	if s == nil {
		s = newSamples(1 << 14)
		sm.latBy[src] = s
	}
	s.add(lat)
	if err != nil {
		code := "other"
		var de *node.DiscoveryError
		if errors.As(err, &de) {
			code = de.Code
		}
		sm.q.Errors[code]++
	}
	sm.q.add(o)
	if o.Expected > 0 {
		sm.q.Scored++
		sm.recallSum += o.Recall()
		if o.Found == o.Expected {
			sm.fullRecall++
		}
	} else {
		sm.q.NoProvider++
	}
	if b := sm.bucketLocked(start); b != nil {
		b.out.add(o)
		b.queries++
		b.lat.add(lat)
	}
}

func (sm *sim) bucketLocked(t time.Time) *bucketAcc {
	i := int(t.Sub(sm.t0) / sm.s.SampleInterval)
	if i < 0 || i >= len(sm.buckets) {
		return nil
	}
	return sm.buckets[i]
}

// ---- background loops ----

func (sm *sim) sampler(ctx context.Context) {
	t := time.NewTicker(sm.s.SampleInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			sm.sampleAt(now)
		}
	}
}

// sampleAt records resources and traffic for the bucket ending at now.
func (sm *sim) sampleAt(now time.Time) {
	heap, stacks := memoryBytes()
	g := runtime.NumGoroutine()
	rss := rssBytes()
	sm.mu.Lock()
	defer sm.mu.Unlock()
	up, live := 0, 0
	var cs connSums
	for _, vn := range sm.nodes {
		if vn.state == stateUp {
			up++
			if !vn.boot {
				live++
				if vn.sh != nil {
					cs.add(vn.sh, now.Add(-sm.s.ConnGrace))
				}
			}
		}
	}
	if up == 0 {
		return
	}
	if live > 0 {
		sm.conns.addMean(cs, live)
	}
	agents, _ := sm.trafficLocked()
	d := agents.sub(sm.lastSample)
	width := now.Sub(sm.lastSampleAt).Seconds()
	sm.lastSample, sm.lastSampleAt = agents, now
	msgs, out, _ := d.sum()
	r := &sm.res
	r.Samples++
	r.PeakNodes = max(r.PeakNodes, up)
	r.GoroutinesPeak = max(r.GoroutinesPeak, g)
	heapMB := float64(heap) / (1 << 20)
	r.HeapPeakMB = max(r.HeapPeakMB, heapMB)
	stacksMB := float64(stacks) / (1 << 20)
	r.StacksPeakMB = max(r.StacksPeakMB, stacksMB)
	sm.stackSum += stacksMB / float64(up)
	r.RSSPeakMB = max(r.RSSPeakMB, float64(rss)/(1<<20))
	sm.goroSum += float64(g) / float64(up)
	sm.heapSum += heapMB / float64(up)
	// The bucket that ends at now (the last one may be shorter). In real
	// time a tick comes a little after its bucket's end: a quarter of an
	// interval is allowed for that. The rates are over the time since
	// the previous sample.
	i := int((now.Sub(sm.t0) - sm.s.SampleInterval/4) / sm.s.SampleInterval)
	if i < 0 || i >= len(sm.buckets) || sm.buckets[i].sampled {
		return
	}
	b := sm.buckets[i]
	b.sampled, b.live, b.heapMB = true, live, heapMB/float64(up)
	if live > 0 && width > 0 {
		b.msgs = float64(msgs) / float64(live) / width
		b.bytes = float64(out) / float64(live) / width
	}
}

func (sm *sim) poller(ctx context.Context) {
	t := time.NewTicker(sm.s.PollInterval)
	defer t.Stop()
	lastWatch := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			sm.pollOnce(now)
			// Complete-view checks are O(nodes²): at most once a second.
			if now.Sub(lastWatch) >= time.Second {
				lastWatch = now
				sm.checkWatches(now)
			}
		}
	}
}

// pollOnce resolves the departures and joins whose effect every node now
// shows.
func (sm *sim) pollOnce(now time.Time) {
	sm.mu.Lock()
	pend := slices.Clone(sm.pend)
	sm.mu.Unlock()
	var done []*pending
	for _, p := range pend {
		live := sm.truth.isLive(p.agent, now)
		switch p.kind {
		case "join":
			if !live {
				sm.mu.Lock()
				sm.churn.DiedBeforeVisible++
				sm.mu.Unlock()
				done = append(done, p)
				continue
			}
			if sm.allSee(p, true) {
				sm.joinSeen.add(now.Sub(p.at))
				done = append(done, p)
			}
		default:
			if live {
				sm.mu.Lock()
				sm.churn.Revived++
				sm.mu.Unlock()
				done = append(done, p)
				continue
			}
			// First the nodes that were up at the departure, then every
			// live node, later joiners included.
			if !p.survivorsDone && sm.allSee(&pending{agent: p.agent, waiting: p.waiting}, false) {
				p.survivorsDone = true
				if p.kind == "crash" {
					sm.crashGone.add(now.Sub(p.at))
				} else {
					sm.leaveGone.add(now.Sub(p.at))
				}
			}
			if p.survivorsDone && sm.allSee(&pending{agent: p.agent}, false) {
				if p.kind == "crash" {
					sm.crashGoneAll.add(now.Sub(p.at))
				} else {
					sm.leaveGoneAll.add(now.Sub(p.at))
				}
				done = append(done, p)
			}
		}
	}
	if len(done) == 0 {
		return
	}
	sm.mu.Lock()
	sm.pend = slices.DeleteFunc(sm.pend, func(p *pending) bool { return slices.Contains(done, p) })
	sm.mu.Unlock()
}

// allSee reports whether every node p waits on (still up) has the agent in
// its view (want: every such node interested in the agent) or none has
// (!want). A nil waiting list means every agent node up now.
func (sm *sim) allSee(p *pending, want bool) bool {
	waiting := p.waiting
	sm.mu.Lock()
	if waiting == nil {
		waiting = sm.upAgentsLocked(-1)
	}
	shards := sm.shardsOf[p.agent]
	sm.mu.Unlock()
	for _, w := range waiting {
		n := sm.nodeOf(w)
		if n == nil {
			continue
		}
		if want && !interested(joinedShards(n), shards) {
			continue
		}
		if _, ok := n.View().Get(p.agent); ok != want {
			return false
		}
	}
	return true
}

func (sm *sim) checkWatches(now time.Time) {
	sm.mu.Lock()
	var ready []reconvergeWatch
	for _, w := range sm.watches {
		if !slices.ContainsFunc(w.joiners, func(vn *vnode) bool { return vn.state == stateStarting }) {
			ready = append(ready, w)
		}
	}
	sm.mu.Unlock()
	if len(ready) == 0 || !sm.converged() {
		return
	}
	sm.mu.Lock()
	defer sm.mu.Unlock()
	for _, w := range ready {
		sm.churn.Reconverge = append(sm.churn.Reconverge, Reconverge{Event: w.event, AtS: w.at.Sub(sm.t0).Seconds(), S: now.Sub(w.at).Seconds()})
	}
	sm.watches = slices.DeleteFunc(sm.watches, func(w reconvergeWatch) bool {
		return slices.ContainsFunc(ready, func(r reconvergeWatch) bool { return r.at.Equal(w.at) && r.event == w.event })
	})
}

func (sm *sim) progressLoop(ctx context.Context) {
	if sm.s.Progress == nil {
		return
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			sm.mu.Lock()
			el := min(now.Sub(sm.t0), sm.s.Duration)
			sm.mu.Unlock()
			sm.progress("run", el)
		}
	}
}

func (sm *sim) progress(phase string, elapsed time.Duration) {
	if sm.s.Progress == nil {
		return
	}
	sm.mu.Lock()
	p := Progress{Phase: phase, Elapsed: elapsed, Duration: sm.s.Duration, Nodes: sm.s.Nodes, Queries: sm.q.Scored + sm.q.NoProvider,
		Recall: sm.q.Outcome.Recall(), Stale: sm.q.Outcome.StaleRate()}
	for _, vn := range sm.nodes {
		if !vn.boot && vn.state == stateUp {
			p.Live++
		}
	}
	sm.mu.Unlock()
	sm.s.Progress(p)
}

// memoryBytes returns the heap that survived the last GC (unlike the heap
// in use, it does not depend on GOGC) and the memory of goroutine stacks.
func memoryBytes() (liveHeap, stacks uint64) {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/heap/stacks:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindUint64 {
		liveHeap = s[0].Value.Uint64()
	} else {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		liveHeap = m.HeapInuse
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		stacks = s[1].Value.Uint64()
	}
	return liveHeap, stacks
}

// ---- teardown ----

// teardown closes every node, bootstrap node, store and host. It waits for
// operations in flight first.
func (sm *sim) teardown() error {
	sm.ops.Wait()
	sm.mu.Lock()
	sr := sm.sybil
	sm.mu.Unlock()
	var sybilErr error
	if sr != nil {
		sybilErr = sr.close()
	}
	sm.mu.Lock()
	var nodes []*node.Node
	var boots []*bootstrap.Node
	var stores []store.Store
	for _, vn := range sm.nodes {
		if vn.n != nil {
			nodes = append(nodes, vn.n)
			vn.n = nil
		}
		if vn.bn != nil {
			boots = append(boots, vn.bn)
			vn.bn = nil
		}
		if vn.st != nil {
			stores = append(stores, vn.st)
			vn.st = nil
		}
		vn.state = stateRetired
	}
	sm.mu.Unlock()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	closeAll := func(fs []func() error) {
		for _, f := range fs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := f(); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	// Nodes close concurrently; an error one returns (an address book
	// flush that misses its deadline) is the node's, not the harness's:
	// it is counted with the stop errors.
	var fs []func() error
	for _, n := range nodes {
		fs = append(fs, func() error {
			if err := n.Close(); err != nil {
				sm.closeFailed(fmt.Errorf("close node at the end: %w", err))
			}
			return nil
		})
	}
	for _, b := range boots {
		fs = append(fs, func() error {
			if err := b.Close(); err != nil {
				sm.closeFailed(fmt.Errorf("close bootstrap node at the end: %w", err))
			}
			return nil
		})
	}
	closeAll(fs)
	sm.watchers.Wait() // every view is closed, and with it the subscriptions
	fs = fs[:0]
	for _, vn := range sm.nodes {
		fs = append(fs, func() error { return sm.detachHost(vn) })
	}
	closeAll(fs)
	sm.probe.close()
	fs = fs[:0]
	for _, st := range stores {
		fs = append(fs, st.Close)
	}
	closeAll(fs)
	if sybilErr != nil {
		sm.closeFailed(fmt.Errorf("close the hostile peer: %w", sybilErr))
	}
	if err := sm.net.close(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("simnet teardown: %w", err)
	}
	return nil
}

// ---- clock helpers (real or virtual: whatever time.Now says) ----

func sleepUntil(ctx context.Context, t time.Time) bool {
	return backoff.Sleep(ctx, time.Until(t))
}
