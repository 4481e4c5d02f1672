package skillcenter

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/Masterminds/semver/v3"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
)

// Registry defaults.
const (
	// DefaultRegistrationLease is how long a registration lives without
	// being posted again (seed 000 AC 7: it disappears after it stops
	// announcing).
	DefaultRegistrationLease = 30 * time.Second
	// DefaultMaxRegistrations bounds the registrations a mirror keeps.
	DefaultMaxRegistrations = 10000
)

// Registry errors.
var (
	// ErrRegistryFull is returned when the registry holds its maximum of
	// registrations.
	ErrRegistryFull = errors.New("registry is full")
	// ErrOlderRecord is returned for a record older (lower seq) than the
	// registered one.
	ErrOlderRecord = errors.New("record is older than the registered one")
)

// registration is one agent registered with the mirror.
type registration struct {
	sa       *record.SignedAgent
	received time.Time
	expires  time.Time
}

// registry keeps the agents registered over POST /agents: verified
// through a trust.Verifier (both record signatures, expiry, policy, the
// first key seen for an agent id keeps it), each alive until its lease
// passes without a new POST or its record expires.
type registry struct {
	ver   *trust.Verifier
	lease time.Duration
	max   int
	now   func() time.Time

	mu sync.Mutex
	m  map[string]*registration
}

func newRegistry(ver *trust.Verifier, lease time.Duration, maxN int, now func() time.Time) *registry {
	return &registry{ver: ver, lease: lease, max: maxN, now: now, m: map[string]*registration{}}
}

// put verifies and registers sa. The same record again renews its lease.
func (r *registry) put(sa *record.SignedAgent) error {
	if err := r.ver.VerifyAgent(sa, trust.VerifyOptions{Transport: "skillcenter"}); err != nil {
		return err
	}
	now := r.now()
	id := sa.Agent.AgentID
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweepLocked(now)
	cur := r.m[id]
	if cur != nil && sa.Agent.Seq < cur.sa.Agent.Seq {
		return fmt.Errorf("%w: seq %d of %s is below the registered %d", ErrOlderRecord, sa.Agent.Seq, id, cur.sa.Agent.Seq)
	}
	if cur == nil && len(r.m) >= r.max {
		return fmt.Errorf("%w: %d registrations", ErrRegistryFull, r.max)
	}
	exp := now.Add(r.lease)
	if e := sa.Agent.ExpiresAt(); e.Before(exp) {
		exp = e
	}
	r.m[id] = &registration{sa: sa, received: now, expires: exp}
	return nil
}

func (r *registry) sweepLocked(now time.Time) {
	for id, e := range r.m {
		if !now.Before(e.expires) {
			delete(r.m, id)
		}
	}
}

// live returns the live registrations by agent id.
func (r *registry) live() []registration {
	now := r.now()
	r.mu.Lock()
	r.sweepLocked(now)
	out := make([]registration, 0, len(r.m))
	for _, e := range r.m {
		out = append(out, *e)
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b registration) int { return strings.Compare(a.sa.Agent.AgentID, b.sa.Agent.AgentID) })
	return out
}

func (r *registry) get(id string) (registration, bool) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.m[id]
	if e == nil || !now.Before(e.expires) {
		return registration{}, false
	}
	return *e, true
}

func (r *registry) len() int {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweepLocked(now)
	return len(r.m)
}

// registeredSkills returns the skills of the live registrations in the
// §7.3 shape, one per skill id: the newest version wins, then the lowest
// agent id (as agentd's API picks among healthy agents).
func registeredSkills(regs []registration) map[string]Skill {
	best := map[string]Skill{}
	for _, reg := range regs {
		a := &reg.sa.Agent
		for i := range a.Skills {
			sk := &a.Skills[i]
			s := Skill{
				ID: sk.SkillID, Name: SkillName(a, sk.SkillID), Version: sk.Version, Type: string(sk.SkillType),
				Capabilities: sk.CapabilityIDs(), Scenes: slices.Clone(sk.Scenes), Endpoint: sk.Endpoint,
				Description: a.Description, Keywords: slices.Clone(a.Tags), AgentID: a.AgentID,
				Status: string(record.StatusHealthy), Source: "registry",
			}
			if sk.Status != "" {
				s.Status = string(sk.Status)
			}
			if s.Scenes == nil {
				s.Scenes = []string{}
			}
			if s.Endpoint == "" {
				s.Endpoint = a.Transport.Endpoint
			}
			if cur, ok := best[s.ID]; !ok || PreferSkill(record.Status(s.Status), s.Version, s.AgentID, record.Status(cur.Status), cur.Version, cur.AgentID) {
				best[s.ID] = s
			}
		}
	}
	return best
}

// SkillName is the name an answer in the §7.3 shape gives a skill of an
// agent record: the agent's metadata.display_name, else its agent_name,
// else the skill id. The registry and the local API's SkillCenter
// endpoints both use it.
func SkillName(a *record.Agent, skillID string) string {
	if s, ok := a.Metadata[record.MetaDisplayName].(string); ok && s != "" {
		return s
	}
	if a.AgentName != "" {
		return a.AgentName
	}
	return skillID
}

// PreferSkill reports whether an answer that lists one entry per skill id
// should show the skill of agent agentA (status, version) rather than that
// of agentB: the healthier status, then the higher semantic version, then
// the lower agent id (so the choice does not depend on order). The
// registry and the local API's SkillCenter endpoints both rank with it.
func PreferSkill(statusA record.Status, versionA, agentA string, statusB record.Status, versionB, agentB string) bool {
	if ra, rb := statusA.Rank(), statusB.Rank(); ra != rb {
		return ra < rb
	}
	va, ea := semver.NewVersion(versionA)
	vb, eb := semver.NewVersion(versionB)
	if ea == nil && eb == nil && !va.Equal(vb) {
		return va.GreaterThan(vb)
	}
	return agentA < agentB
}
