package api

import (
	"net/http"
	"slices"
	"time"

	"github.com/agentd/agentd/node"
	"github.com/agentd/agentd/record"
)

// explainParams are GET /explain's parameters: the filters of GET /agents,
// an agent id, and a bound on the resolver's lookup.
var explainParams = append(slices.Clone(listParams), "agent_id", "timeout_ms")

// maxExplainTimeout bounds timeout_ms: an explanation must answer inside
// the request timeout.
const maxExplainTimeout = 10 * time.Second

// handleExplain answers why an agent is or is not visible on this node, or
// how a query is resolved here (node.Explain).
func (s *Server) handleExplain(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r.URL.RawQuery, explainParams...)
	if err != nil {
		return err
	}
	aq, err := parseAgentFilter(q)
	if err != nil {
		return err
	}
	if aq.filter.AgentID, err = q.one("agent_id"); err != nil {
		return err
	}
	if aq.filter.AgentID != "" {
		if err := record.ValidateAgentID(aq.filter.AgentID); err != nil {
			return badRequest("agent_id", "%v", err)
		}
	} else if !aq.filtered {
		return badRequest("agent_id", "name an agent (agent_id) or a query (capability, skill, scene, type, tag, tenant, version, q)")
	}
	// 0: the node's lookup timeout (lookup_timeout in the configuration).
	ms, err := q.integer("timeout_ms", 0, 0, int(maxExplainTimeout/time.Millisecond))
	if err != nil {
		return err
	}
	ex, err := s.n.Explain(r.Context(), node.ExplainQuery{Filter: aq.filter, LocalOnly: aq.localOnly, Timeout: time.Duration(ms) * time.Millisecond})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, ex)
	return nil
}
