package api

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const fuzzKeepID = "5b0f9e4c-8a7d-4c3b-9e2f-1a6b7c8d9e0f"

// FuzzHandler sends arbitrary requests (method, path with query, body)
// through the whole handler: nothing a client sends is answered with a
// 5xx, every error is the JSON error body, and the agent registered before
// is never lost.
func FuzzHandler(f *testing.F) {
	n := newNode(f, nodeOpts{})
	s, err := New(n.Node, Config{Version: "fuzz"}, slog.New(slog.DiscardHandler))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = s.Close() })
	h := s.Handler()
	keep := spec("skill-keep", "cap-keep")
	keep.AgentID = fuzzKeepID
	if _, err := n.Register(f.Context(), keep); err != nil {
		f.Fatal(err)
	}
	for _, seed := range []struct {
		method, path string
		body         string
	}{
		{"POST", "/agents", string(announceJSON(f, spec("skill-a", "cap-a")))},
		{"POST", "/agents", `{"protocol_version":"v2.0","agent":{"capabilities":{}}}`},
		{"GET", "/agents?capability=cap-keep&tag=tier%3Dcore&version=%3E%3D1.0.0&limit=3", ""},
		{"GET", "/agents?q=test&include_stale=true&local_only=1", ""},
		{"PUT", "/agents/" + n.id.AgentID + "/status", `{"status":"DEGRADED"}`},
		{"DELETE", "/agents/" + n.id.AgentID + "?reason=ERROR", ""},
		{"POST", "/rpc", `[{"jsonrpc":"2.0","method":"rtfs.registry.discover","params":{"capability_id":"cap-keep","discovery_query":{"text_search":"x"}},"id":1}]`},
		{"POST", "/rpc", `{"jsonrpc":"2.0","method":"rtfs.registry.register","params":{"agent_card":` + string(seedFile(f, "002-agent-card.json")) + `,"ttl_seconds":60},"id":"r"}`},
		{"POST", "/api/skills/search", `{"capabilities":["cap-keep"],"scenes":["auth"],"keywords":["keep"],"version":">=1.0.0"}`},
		{"GET", "/api/skills/skill-keep", ""},
		{"GET", "/capabilities?prefix=cap", ""},
		{"GET", "/schemas/query", ""},
		{"OPTIONS", "/agents", ""},
		{"GET", "/explain?agent_id=" + fuzzKeepID + "&capability=cap-keep&version=%3E%3D2&local_only=true", ""},
		{"GET", "/explain?capability=cap-keep&q=keep&tag=a&timeout_ms=5", ""},
		{"GET", "/ui/app.js", ""},
		{"GET", "/ui/..%2fopenapi.json", ""},
	} {
		f.Add(seed.method, seed.path, []byte(seed.body))
	}
	f.Fuzz(func(t *testing.T, method, path string, body []byte) {
		if !validMethod(method) || !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " \t\r\n#") || len(path) > 4096 {
			return // not an HTTP request line net/http would deliver
		}
		req := httptest.NewRequest("GET", "http://127.0.0.1/", nil)
		req.Method = method
		if err := setPath(req, path); err != nil {
			return
		}
		req.Body = httpBody(body)
		req.ContentLength = int64(len(body))
		if len(body) > 0 {
			req.Header.Set("Content-Type", "application/json")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code >= 500 {
			t.Fatalf("%s %q → %d: %s", method, path, w.Code, w.Body.Bytes())
		}
		if w.Code >= 400 {
			var e Error
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Code == "" || e.Message == "" {
				t.Fatalf("%s %q → %d without the error body: %q", method, path, w.Code, w.Body.Bytes())
			}
		}
		if a, ok := n.View().Get(fuzzKeepID); !ok || !a.Local {
			t.Fatalf("%s %q %q lost the registered agent", method, path, body)
		}
	})
}

func validMethod(m string) bool {
	if m == "" || len(m) > 16 {
		return false
	}
	for _, r := range m {
		if r < 'A' || r > 'Z' {
			return false
		}
	}
	return true
}

func setPath(r *http.Request, p string) error {
	u, err := r.URL.Parse(p)
	if err != nil {
		return err
	}
	r.URL = u
	r.RequestURI = p
	return nil
}

type bodyReader struct{ *bytes.Reader }

func (bodyReader) Close() error { return nil }

func httpBody(b []byte) bodyReader { return bodyReader{bytes.NewReader(b)} }
