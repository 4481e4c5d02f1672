package api

import (
	"context"
	"net/http"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/agentd/agentd/record"
)

// A2A Agent Cards out (docs/protocol.md, "A2A Agent Cards"): any agent
// this node can answer for, as a card; for an agent whose record carries
// this node's agent key, the card is signed with it (a JWS over the RFC
// 8785 form of the card, record.SignA2ACard), so an A2A client can check it
// came from the key of the agentd record.

// handleCard is GET /agents/{id}/card.
func (s *Server) handleCard(w http.ResponseWriter, r *http.Request) error {
	id, err := pathAgentID(r)
	if err != nil {
		return err
	}
	card, err := s.cardOf(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, card)
	return nil
}

// handleWellKnownCard is GET /.well-known/agent-card.json: the card of the
// agent Config.AgentCard names, open to anyone (A2A discovery is public)
// but only for that one hosted agent.
func (s *Server) handleWellKnownCard(w http.ResponseWriter, r *http.Request) error {
	id := s.cfg.AgentCard
	if id == "self" {
		id = s.n.Identity().AgentID
	}
	if id == "" {
		return newError(http.StatusNotFound, record.CodeNotFound, "", "this node serves no A2A Agent Card (api.agentCard is not set)")
	}
	if a, ok := s.n.View().Get(id); !ok || !a.Local {
		return newError(http.StatusNotFound, record.CodeNotFound, "", "the agent api.agentCard names (%s) is not hosted by this node", id)
	}
	card, err := s.cardOf(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, card)
	return nil
}

// cardOf answers an agent as an A2A card, signed when the node holds the
// agent's key.
func (s *Server) cardOf(ctx context.Context, id string) (*a2a.AgentCard, error) {
	res, err := s.n.GetAgent(ctx, id, true)
	if err != nil {
		return nil, err
	}
	if res.Agent == nil {
		return nil, newError(http.StatusNotFound, record.CodeNotFound, "agent_id", "agent %s is unknown", id)
	}
	card, err := record.AgentToA2ACard(res.Agent)
	if err != nil {
		return nil, err
	}
	ident := s.n.Identity()
	if res.Record != nil && res.Agent.PublicKey == ident.PublicKeyPEM() {
		if err := record.SignA2ACard(card, ident.AgentKey, res.Agent.AgentID); err != nil {
			return nil, err
		}
	}
	return card, nil
}
