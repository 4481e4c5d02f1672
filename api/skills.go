package api

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/Masterminds/semver/v3"
	"github.com/agentd/agentd/node"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/skillcenter"
	"github.com/agentd/agentd/store"
)

// Skill is one skill in the SkillCenter shape (seed 001 §7.3), answered
// from the node's view. agentId, status and source are agentd extensions
// (a SkillCenter client ignores them). When several agents offer the same
// skill id, the healthiest (then the newest version, then the lowest
// agent id) stands for it.
type Skill struct {
	ID           string        `json:"id"`
	Name         string        `json:"name"`
	Version      string        `json:"version"`
	Type         string        `json:"type"`
	Capabilities []string      `json:"capabilities"`
	Scenes       []string      `json:"scenes"`
	Endpoint     string        `json:"endpoint"`
	DownloadURL  string        `json:"downloadUrl,omitempty"`
	AgentID      string        `json:"agentId"`
	Status       record.Status `json:"status,omitempty"`
	Source       string        `json:"source,omitempty"`
}

// SkillList is the answer of GET /api/skills and POST /api/skills/search
// (seed 001 §7.3).
type SkillList struct {
	Total  int     `json:"total"`
	Skills []Skill `json:"skills"`
}

// SkillSearch is the request of POST /api/skills/search (seed 001 §7.2),
// the same request the SkillCenter mirror takes: a skill matches when it
// has every capability, one of the scenes (if any), one of the types (if
// any), every keyword (case-insensitive, in its id, name, capabilities and
// descriptions) and a version inside the semver range; limit and offset
// page the answer (total counts every match). Unknown members are
// ignored, as a SkillCenter does.
type SkillSearch = skillcenter.SearchRequest

// Metadata keys a record may use to give its skills a SkillCenter
// download URL.
var downloadKeys = []string{"downloadUrl", "download_url"}

// skillsOf converts results into one entry per skill id.
func skillsOf(res []node.Result) []Skill {
	best := map[string]Skill{}
	for _, r := range res {
		if r.Agent == nil || r.Stale {
			continue
		}
		a := r.Agent
		for i := range a.Skills {
			sk := &a.Skills[i]
			e := Skill{
				ID: sk.SkillID, Name: skillcenter.SkillName(a, sk.SkillID), Version: sk.Version, Type: string(sk.SkillType),
				Capabilities: sk.CapabilityIDs(), Scenes: slices.Clone(sk.Scenes), Endpoint: sk.Endpoint,
				AgentID: a.AgentID, Status: worseStatus(r.Status, sk.Status), Source: string(r.Source),
			}
			if e.Scenes == nil {
				e.Scenes = []string{}
			}
			if e.Endpoint == "" {
				e.Endpoint = a.Transport.Endpoint
			}
			for _, k := range downloadKeys {
				if u, ok := a.Metadata[k].(string); ok && u != "" {
					e.DownloadURL = u
					break
				}
			}
			if cur, ok := best[e.ID]; !ok || skillcenter.PreferSkill(e.Status, e.Version, e.AgentID, cur.Status, cur.Version, cur.AgentID) {
				best[e.ID] = e
			}
		}
	}
	out := make([]Skill, 0, len(best))
	for _, e := range best {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func worseStatus(agent, skill record.Status) record.Status {
	if agent == "" {
		agent = record.StatusHealthy
	}
	if skill != "" && skill.Rank() > agent.Rank() {
		return skill
	}
	return agent
}

// skillResults asks the resolver; a miss is an empty answer.
func (s *Server) skillResults(ctx context.Context, q node.Query) ([]node.Result, error) {
	res, err := s.n.Discover(ctx, q)
	var de *node.DiscoveryError
	if errors.As(err, &de) && de.Code == record.CodeNoSkillsFound {
		return nil, nil
	}
	return res, err
}

func (s *Server) handleSkills(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r.URL.RawQuery, "limit")
	if err != nil {
		return err
	}
	limit, err := q.integer("limit", MaxLimit, 1, MaxLimit)
	if err != nil {
		return err
	}
	res, err := s.skillResults(r.Context(), node.Query{LocalOnly: true})
	if err != nil {
		return err
	}
	skills := skillsOf(res)
	if len(skills) > limit {
		skills = skills[:limit]
	}
	writeJSON(w, http.StatusOK, SkillList{Total: len(skills), Skills: skills})
	return nil
}

func (s *Server) handleSkill(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if !record.ValidIdent(id) {
		return badRequest("id", "%q is not a skill id", truncate(id))
	}
	if _, err := parseQuery(r.URL.RawQuery); err != nil {
		return err
	}
	res, err := s.skillResults(r.Context(), node.Query{Filter: store.Filter{Skill: id}, LocalOnly: fromCatalogClient(r)})
	if err != nil {
		return err
	}
	for _, sk := range skillsOf(res) {
		if sk.ID == id {
			writeJSON(w, http.StatusOK, sk)
			return nil
		}
	}
	return newError(http.StatusNotFound, record.CodeNoSkillsFound, "id", "no agent offers skill %q", id)
}

func (s *Server) handleSkillSearch(w http.ResponseWriter, r *http.Request) error {
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	var req SkillSearch
	if err := decodeObject(body, &req, "", true); err != nil {
		return err
	}
	if err := req.Validate(); err != nil {
		return err
	}
	var constraint *semver.Constraints
	if req.Version != "" {
		if constraint, err = semver.NewConstraint(req.Version); err != nil {
			return badRequest("version", "%q is not a semver range: %v", truncate(req.Version), err)
		}
	}
	// The resolver looks up the first capability (a DHT key when the view
	// has nothing); the rest of the criteria are checked per skill.
	q := node.Query{LocalOnly: len(req.Capabilities) == 0 || fromCatalogClient(r)}
	if len(req.Capabilities) > 0 {
		q.Capability = req.Capabilities[0]
	}
	res, err := s.skillResults(r.Context(), q)
	if err != nil {
		return err
	}
	matched := skillsOfMatching(res, req, constraint)
	out := SkillList{Total: len(matched), Skills: []Skill{}}
	if req.Offset < len(matched) {
		matched = matched[req.Offset:]
		if req.Limit > 0 && req.Limit < len(matched) {
			matched = matched[:req.Limit]
		}
		out.Skills = append(out.Skills, matched...)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// skillsOfMatching keeps, per skill id, the best entry among the skills
// that satisfy the search.
func skillsOfMatching(res []node.Result, req SkillSearch, c *semver.Constraints) []Skill {
	var keep []node.Result
	for _, r := range res {
		if r.Agent == nil {
			continue
		}
		a := *r.Agent
		a.Skills = nil
		for _, sk := range r.Agent.Skills {
			if skillMatches(r.Agent, &sk, req, c) {
				a.Skills = append(a.Skills, sk)
			}
		}
		if len(a.Skills) > 0 {
			r.Agent = &a
			keep = append(keep, r)
		}
	}
	return skillsOf(keep)
}

func skillMatches(a *record.Agent, sk *record.Skill, req SkillSearch, c *semver.Constraints) bool {
	for _, cp := range req.Capabilities {
		if _, ok := sk.Capability(cp); !ok {
			return false
		}
	}
	if len(req.Scenes) > 0 && !slices.ContainsFunc(req.Scenes, func(s string) bool { return slices.Contains(sk.Scenes, s) }) {
		return false
	}
	if len(req.Types) > 0 && !slices.Contains(req.Types, string(sk.SkillType)) {
		return false
	}
	if c != nil {
		v, err := semver.NewVersion(sk.Version)
		if err != nil || !c.Check(v) {
			return false
		}
	}
	for _, k := range req.Keywords {
		if !skillHasText(a, sk, strings.ToLower(strings.TrimSpace(k))) {
			return false
		}
	}
	return true
}

func skillHasText(a *record.Agent, sk *record.Skill, k string) bool {
	has := func(s string) bool { return strings.Contains(strings.ToLower(s), k) }
	if has(sk.SkillID) || has(skillcenter.SkillName(a, sk.SkillID)) || has(a.AgentName) || has(a.Description) {
		return true
	}
	for _, cp := range sk.Capabilities {
		if has(cp.ID) || has(cp.Description) {
			return true
		}
	}
	for _, t := range a.Tags {
		if has(t) {
			return true
		}
	}
	return false
}

// fromCatalogClient reports whether the request comes from an agentd's
// SkillCenter client: such requests are answered from the live view only,
// never through this node's own resolver, so agentds that name each other
// (or themselves) as their catalog cannot loop.
func fromCatalogClient(r *http.Request) bool {
	return r.Header.Get(skillcenter.CatalogHeader) != ""
}
