package view

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/agentd/agentd/record"
)

// SceneJoin is the answer to a scene request (seed 001 §4.3).
type SceneJoin struct {
	SceneID        string         `json:"sceneId"`
	GroupID        string         `json:"groupId"`
	ConnectionInfo ConnectionInfo `json:"connectionInfo"`
	SkillInfo      SkillInfo      `json:"skillInfo"`
	AgentID        string         `json:"agentId"`
	PeerID         string         `json:"peerId"`
	Status         record.Status  `json:"status"`
}

// ConnectionInfo says how to reach the chosen skill. Fields the skill's
// endpoint does not determine are left empty (agentd never invents API
// keys).
type ConnectionInfo struct {
	Protocol string `json:"protocol"`
	Host     string `json:"host"`
	Port     int    `json:"port,omitempty"`
	BasePath string `json:"basePath,omitempty"`
	Endpoint string `json:"endpoint"`
}

// SkillInfo names the chosen skill.
type SkillInfo struct {
	SkillID      string   `json:"skillId"`
	Version      string   `json:"version"`
	Capabilities []string `json:"capabilities"`
}

// ErrSceneNotFound is returned when no live, healthy skill of the scene
// offers every requested capability (seed 001 §4.2 SCENE_NOT_FOUND).
var ErrSceneNotFound = fmt.Errorf("%s: no healthy skill in the scene offers the capabilities", record.CodeSceneNotFound)

// SceneMembers returns the live agents that announce at least one skill in
// the scene.
func (v *View) SceneMembers(scene string) []Agent {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []Agent
	for _, s := range v.agents {
		for _, sk := range s.rec.Agent.Skills {
			if containsString(sk.Scenes, scene) {
				out = append(out, v.snapshot(s))
				break
			}
		}
	}
	return out
}

// RequestScene returns the connection info of the best live skill in the
// scene that offers every capability in caps: HEALTHY before DEGRADED
// (UNHEALTHY and MAINTENANCE skills are never chosen), then the highest
// mean confidence_hint, then agent id.
func (v *View) RequestScene(scene string, caps []string) (SceneJoin, error) {
	type cand struct {
		s     *agentState
		skill *record.Skill
		st    record.Status
		conf  float64
	}
	v.mu.Lock()
	var best *cand
	for _, s := range v.agents {
		for i := range s.rec.Agent.Skills {
			sk := &s.rec.Agent.Skills[i]
			if !containsString(sk.Scenes, scene) {
				continue
			}
			ok, sum := true, 0.0
			for _, c := range caps {
				capb, found := sk.Capability(c)
				if !found {
					ok = false
					break
				}
				sum += capb.Confidence()
			}
			if !ok {
				continue
			}
			st := worse(v.effective(s), sk.Status)
			if st != record.StatusHealthy && st != record.StatusDegraded {
				continue
			}
			c := &cand{s: s, skill: sk, st: st}
			if len(caps) > 0 {
				c.conf = sum / float64(len(caps))
			}
			if best == nil || better(c.st, c.conf, c.s.rec.Agent.AgentID, best.st, best.conf, best.s.rec.Agent.AgentID) {
				best = c
			}
		}
	}
	if best == nil {
		v.mu.Unlock()
		return SceneJoin{}, ErrSceneNotFound
	}
	a := &best.s.rec.Agent
	sk := best.skill
	j := SceneJoin{
		SceneID:        scene,
		GroupID:        record.SceneGroupID(scene),
		ConnectionInfo: parseEndpoint(firstNonEmpty(sk.Endpoint, a.Transport.Endpoint), a.Transport.Type),
		SkillInfo:      SkillInfo{SkillID: sk.SkillID, Version: sk.Version, Capabilities: sk.CapabilityIDs()},
		AgentID:        a.AgentID, PeerID: a.PeerID, Status: best.st,
	}
	v.mu.Unlock()
	return j, nil
}

func better(st record.Status, conf float64, id string, bst record.Status, bconf float64, bid string) bool {
	if st.Rank() != bst.Rank() {
		return st.Rank() < bst.Rank()
	}
	if conf != bconf {
		return conf > bconf
	}
	return id < bid
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// parseEndpoint splits "https://h:p/base", "h:p" or "h" into its parts.
func parseEndpoint(ep, transport string) ConnectionInfo {
	ci := ConnectionInfo{Endpoint: ep, Protocol: transport}
	if strings.Contains(ep, "://") {
		if u, err := url.Parse(ep); err == nil {
			ci.Protocol = u.Scheme
			ci.Host = u.Hostname()
			if p, err := strconv.Atoi(u.Port()); err == nil {
				ci.Port = p
			}
			ci.BasePath = u.Path
			return ci
		}
	}
	if h, p, err := net.SplitHostPort(ep); err == nil {
		ci.Host = h
		if n, err := strconv.Atoi(p); err == nil {
			ci.Port = n
		}
		return ci
	}
	ci.Host = ep
	return ci
}
