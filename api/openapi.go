package api

import (
	_ "embed"
	"net/http"
)

// OpenAPI is the OpenAPI 3.1 description of the REST and SkillCenter
// surfaces, served at GET /openapi.json. docs/openapi.json is a copy of
// it (a test keeps them identical).
//
//go:embed openapi.json
var OpenAPI []byte

func (s *Server) handleOpenAPI(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(OpenAPI)
	return nil
}
