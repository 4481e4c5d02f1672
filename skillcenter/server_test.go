package skillcenter

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/golang-jwt/jwt/v5"
)

func TestLoadCatalogReportsEveryProblem(t *testing.T) {
	dir := t.TempDir()
	pkg := []byte("package")
	writeSkill(t, dir, "good", skillManifest("good", []string{"c"}, pkg), pkg)
	writeSkill(t, dir, "renamed", skillManifest("other", []string{"c"}, nil), nil)
	bad := skillManifest("bad-digest", []string{"c"}, pkg)
	writeSkill(t, dir, "bad-digest", bad, []byte("packagX"))
	writeSkill(t, dir, "bad-size", skillManifest("bad-size", []string{"c"}, pkg), []byte("package, longer"))
	writeSkill(t, dir, "no-file", skillManifest("no-file", []string{"c"}, pkg), nil)
	writeSkill(t, dir, "two", skillManifest("two", []string{"c"}, nil), nil)
	if err := os.WriteFile(filepath.Join(dir, "two", "manifest.yaml"), []byte("id: two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Ignored: hidden directories and plain files at the top.
	if err := os.Mkdir(filepath.Join(dir, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "README"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadCatalog(dir)
	if err == nil {
		t.Fatal("loaded")
	}
	msg := err.Error()
	for _, want := range []string{
		filepath.Join(dir, "renamed", "manifest.json") + `: id: "other" is not the directory's name "renamed"`,
		filepath.Join(dir, "bad-digest", "manifest.json") + ": package.sha256: is ",
		filepath.Join(dir, "bad-size", "manifest.json") + ": package.size: is 7;",
		filepath.Join(dir, "no-file", "manifest.json") + ": package.file: ",
		filepath.Join(dir, "two") + ": holds manifest.json and manifest.yaml",
		filepath.Join(dir, "empty") + ": no manifest.json",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("missing %q in:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "good") || strings.Contains(msg, ".git") || strings.Contains(msg, "README") {
		t.Errorf("reported a good or ignored entry:\n%s", msg)
	}
	// A signed manifest whose signature does not verify is refused.
	dir2 := t.TempDir()
	signed, err := SignManifest(mustJSON(t, skillManifest("s", []string{"c"}, nil)), newKey(t), "")
	if err != nil {
		t.Fatal(err)
	}
	writeSkill(t, dir2, "s", bytes.Replace(signed, []byte(`"0.7.0"`), []byte(`"0.7.1"`), 1), nil)
	if _, err := LoadCatalog(dir2); err == nil || !strings.Contains(err.Error(), "signature: manifest signature does not verify") {
		t.Fatalf("bad signature: %v", err)
	}
}

func get(t testing.TB, url string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return do(t, req)
}

func post(t testing.TB, url, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return do(t, req)
}

func do(t testing.TB, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	req.Close = true // no idle connections left for goleak
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func apiErrOf(t testing.TB, b []byte) apiError {
	t.Helper()
	var e apiError
	if err := json.Unmarshal(b, &e); err != nil || e.Code == "" {
		t.Fatalf("not an error body: %s", b)
	}
	return e
}

func TestMirrorCatalogEndpoints(t *testing.T) {
	m := newMirror(t, seedCatalog(t), ServerOptions{})
	resp, b := get(t, m.url+"/api/skills")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	l, err := DecodeSkillList(b)
	if err != nil {
		t.Fatal(err)
	}
	if l.Total != 2 || l.Skills[0].ID != "skill-org-dingding" || l.Skills[1].ID != "skill-org-feishu" {
		t.Fatalf("list %+v", l)
	}
	if l.Skills[0].DownloadURL != "" || l.Skills[1].DownloadURL != m.url+"/api/skills/skill-org-feishu/download" {
		t.Fatalf("download URLs %q %q", l.Skills[0].DownloadURL, l.Skills[1].DownloadURL)
	}
	for _, s := range l.Skills {
		if s.Manifest != nil {
			t.Fatal("a list carries manifests")
		}
	}

	// ETag and If-None-Match.
	etag := resp.Header.Get("ETag")
	if !strings.HasPrefix(etag, `"`) || len(etag) != 34 {
		t.Fatalf("ETag %q", etag)
	}
	resp, b = get(t, m.url+"/api/skills", "If-None-Match", `"nope", W/`+etag)
	if resp.StatusCode != http.StatusNotModified || len(b) != 0 {
		t.Fatalf("conditional GET: %d %q", resp.StatusCode, b)
	}
	resp, _ = get(t, m.url+"/api/skills", "If-None-Match", `"other"`)
	if resp.StatusCode != 200 {
		t.Fatalf("other ETag: %d", resp.StatusCode)
	}

	// Pages.
	resp, b = get(t, m.url+"/api/skills?limit=1&offset=1")
	l, _ = DecodeSkillList(b)
	if resp.StatusCode != 200 || l.Total != 2 || len(l.Skills) != 1 || l.Skills[0].ID != "skill-org-feishu" {
		t.Fatalf("page: %d %s", resp.StatusCode, b)
	}
	for _, q := range []string{"limit=0", "limit=1001", "offset=-1", "limit=x", "limit=1&limit=2"} {
		resp, b = get(t, m.url+"/api/skills?"+q)
		if e := apiErrOf(t, b); resp.StatusCode != 400 || e.Code != record.CodeMalformedPayload {
			t.Errorf("%s: %d %s", q, resp.StatusCode, b)
		}
	}

	// One skill, with its manifest.
	resp, b = get(t, m.url+"/api/skills/skill-org-feishu")
	s, err := DecodeSkill(b)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s %v", resp.StatusCode, b, err)
	}
	man, err := ParseManifestJSON(s.Manifest)
	if err != nil || man.ID != "skill-org-feishu" || s.Package == nil || s.Package.SHA256 != man.Package.SHA256 {
		t.Fatalf("manifest %s: %v", s.Manifest, err)
	}
	resp, _ = get(t, m.url+"/api/skills/skill-org-feishu", "If-None-Match", resp.Header.Get("ETag"))
	if resp.StatusCode != http.StatusNotModified {
		t.Fatalf("conditional GET of a skill: %d", resp.StatusCode)
	}
	resp, b = get(t, m.url+"/api/skills/nothing-here")
	if e := apiErrOf(t, b); resp.StatusCode != 404 || e.Code != record.CodeNoSkillsFound || e.Field != "id" {
		t.Fatalf("unknown skill: %d %s", resp.StatusCode, b)
	}
	resp, b = get(t, m.url+"/api/skills/a..b")
	if resp.StatusCode != 400 {
		t.Fatalf("bad id: %d %s", resp.StatusCode, b)
	}

	// Wrong method and unknown path: JSON errors.
	resp, b = post(t, m.url+"/api/skills", `{}`)
	if e := apiErrOf(t, b); resp.StatusCode != 405 || e.Code != record.CodeMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Fatalf("POST /api/skills: %d %s %q", resp.StatusCode, b, resp.Header.Get("Allow"))
	}
	resp, b = get(t, m.url+"/api/skills/search")
	if resp.StatusCode != 404 {
		t.Fatalf("GET /api/skills/search: %d %s", resp.StatusCode, b)
	}
	resp, b = get(t, m.url+"/nope")
	if e := apiErrOf(t, b); resp.StatusCode != 404 || e.Code != record.CodeNotFound {
		t.Fatalf("unknown path: %d %s", resp.StatusCode, b)
	}
	resp, b = get(t, m.url+"/healthz")
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"skills":2`) {
		t.Fatalf("health: %d %s", resp.StatusCode, b)
	}
}

func TestMirrorSearch(t *testing.T) {
	dir := seedCatalog(t)
	m3 := skillManifest("tool-grep", []string{"text-search"}, nil)
	m3["type"], m3["version"], m3["scenes"], m3["keywords"] = "tool-skill", "1.4.2", []string{"dev", "ops"}, []string{"ripgrep"}
	writeSkill(t, dir, "tool-grep", m3, nil)
	m := newMirror(t, dir, ServerOptions{PublicURL: "https://mirror.example/"})
	search := func(body string) []string {
		t.Helper()
		resp, b := post(t, m.url+"/api/skills/search", body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", body, resp.StatusCode, b)
		}
		l, err := DecodeSkillList(b)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, s := range l.Skills {
			ids = append(ids, s.ID)
		}
		return ids
	}
	for _, c := range []struct {
		body string
		want []string
	}{
		// The §7.2 example: every criterion, the keyword applied.
		{`{"capabilities":["org-data-read","user-auth"],"scenes":["auth"],"types":["enterprise-skill"],"keywords":["feishu"],"version":">=0.7.0"}`, []string{"skill-org-feishu"}},
		{`{"capabilities":["org-data-read","user-auth"],"scenes":["auth"],"types":["enterprise-skill"],"version":">=0.7.0"}`, []string{"skill-org-dingding", "skill-org-feishu"}},
		{`{}`, []string{"skill-org-dingding", "skill-org-feishu", "tool-grep"}},
		{`{"capabilities":["org-data-read","text-search"]}`, nil},                                               // all capabilities
		{`{"scenes":["ops","nowhere"]}`, []string{"tool-grep"}},                                                 // any scene
		{`{"types":["tool-skill","integration-skill"]}`, []string{"tool-grep"}},                                 // any type
		{`{"keywords":["RIPGREP"]}`, []string{"tool-grep"}},                                                     // case-insensitive, keywords
		{`{"keywords":["org","DingTalk"]}`, []string{"skill-org-dingding"}},                                     // every keyword
		{`{"keywords":["search"]}`, []string{"tool-grep"}},                                                      // capability ids
		{`{"version":"^1.4"}`, []string{"tool-grep"}},                                                           // semver range
		{`{"version":">=0.7.0 <1.0.0","types":["enterprise-skill"],"limit":1}`, []string{"skill-org-dingding"}}, // page
		{`{"limit":1,"offset":2}`, []string{"tool-grep"}},
		{`{"unknown":1,"capabilities":null}`, []string{"skill-org-dingding", "skill-org-feishu", "tool-grep"}}, // unknown members ignored
	} {
		if got := search(c.body); !slices.Equal(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.body, got, c.want)
		}
	}
	_, b := post(t, m.url+"/api/skills/search", `{"keywords":["feishu"]}`)
	if !strings.Contains(string(b), `"downloadUrl":"https://mirror.example/api/skills/skill-org-feishu/download"`) {
		t.Fatalf("public URL not used: %s", b)
	}
	for _, c := range []struct{ body, field string }{
		{`{"capabilities":"x"}`, "capabilities"},
		{`{"version":"not a range"}`, "version"},
		{`{"types":["app"]}`, "types[0]"},
		{`{"a":1,"a":2}`, ""},
		{`[]`, ""},
		{`{"Capabilities":["x"]}`, "__ignored"}, // member names are exact: ignored, so it matches all
	} {
		resp, b := post(t, m.url+"/api/skills/search", c.body)
		if c.field == "__ignored" {
			if resp.StatusCode != 200 {
				t.Errorf("%s: %d", c.body, resp.StatusCode)
			}
			continue
		}
		if e := apiErrOf(t, b); resp.StatusCode != 400 || e.Field != c.field {
			t.Errorf("%s: %d %s", c.body, resp.StatusCode, b)
		}
	}
	resp, b := post(t, m.url+"/api/skills/search", `{"keywords":["`+strings.Repeat("x", MaxSearchBytes)+`"]}`)
	if e := apiErrOf(t, b); resp.StatusCode != 413 || e.Code != record.CodeRequestTooLarge {
		t.Fatalf("oversize search: %d %s", resp.StatusCode, b)
	}
}

func TestMirrorDownload(t *testing.T) {
	dir := seedCatalog(t)
	m := newMirror(t, dir, ServerOptions{})
	pkg := []byte("feishu package bytes")
	sum := sha256.Sum256(pkg)
	resp, b := get(t, m.url+"/api/skills/skill-org-feishu/download")
	if resp.StatusCode != 200 || !bytes.Equal(b, pkg) {
		t.Fatalf("%d %q", resp.StatusCode, b)
	}
	h := resp.Header
	if h.Get("ETag") != `"`+hex.EncodeToString(sum[:])+`"` || h.Get("X-Checksum-Sha256") != hex.EncodeToString(sum[:]) ||
		h.Get("Content-Digest") != "sha-256=:"+base64.StdEncoding.EncodeToString(sum[:])+":" ||
		h.Get("Content-Disposition") != `attachment; filename=skill-org-feishu-0.7.0.tar.gz` ||
		h.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("headers %v", h)
	}
	if d, err := announcedDigest(h); err != nil || d != hex.EncodeToString(sum[:]) {
		t.Fatalf("announced digest %q %v", d, err)
	}
	resp, _ = get(t, m.url+"/api/skills/skill-org-feishu/download", "If-None-Match", h.Get("ETag"))
	if resp.StatusCode != http.StatusNotModified {
		t.Fatalf("conditional download: %d", resp.StatusCode)
	}
	resp, b = get(t, m.url+"/api/skills/skill-org-feishu/download", "Range", "bytes=0-5")
	if resp.StatusCode != http.StatusPartialContent || string(b) != "feishu" {
		t.Fatalf("range: %d %q", resp.StatusCode, b)
	}
	resp, b = get(t, m.url+"/api/skills/skill-org-dingding/download")
	if e := apiErrOf(t, b); resp.StatusCode != 404 || e.Code != record.CodeNotFound {
		t.Fatalf("no package: %d %s", resp.StatusCode, b)
	}
	// A package that changed size under the server is not served.
	if err := os.WriteFile(filepath.Join(dir, "skill-org-feishu", "skill-org-feishu-0.7.0.tar.gz"), []byte("tampered"), 0o644); err != nil {
		t.Fatal(err)
	}
	resp, b = get(t, m.url+"/api/skills/skill-org-feishu/download")
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("changed package: %d %s", resp.StatusCode, b)
	}
	// Reload fails (the digest no longer matches) and keeps the catalog.
	if err := m.s.Reload(); err == nil {
		t.Fatal("reload of a broken catalog succeeded")
	}
	if m.s.Catalog().Len() != 2 {
		t.Fatal("the catalog was dropped")
	}
}

func TestAnnouncedDigest(t *testing.T) {
	sum := sha256.Sum256([]byte("x"))
	hexs, b64 := hex.EncodeToString(sum[:]), base64.StdEncoding.EncodeToString(sum[:])
	other := sha256.Sum256([]byte("y"))
	for _, c := range []struct {
		h       http.Header
		want    string
		wantErr bool
	}{
		{http.Header{}, "", false},
		{http.Header{"Content-Digest": {"sha-512=:AAAA:, sha-256=:" + b64 + ":"}}, hexs, false},
		{http.Header{"X-Checksum-Sha256": {strings.ToUpper(hexs)}}, hexs, false},
		{http.Header{"Content-Digest": {"sha-256=:" + b64 + ":"}, "X-Checksum-Sha256": {hex.EncodeToString(other[:])}}, "", true},
		{http.Header{"Content-Digest": {"sha-256=" + b64}}, "", true},
		{http.Header{"Content-Digest": {"sha-256=:AAAA:"}}, "", true},
		{http.Header{"X-Checksum-Sha256": {"abc"}}, "", true},
	} {
		got, err := announcedDigest(c.h)
		if got != c.want || (err != nil) != c.wantErr {
			t.Errorf("%v: %q %v", c.h, got, err)
		}
	}
}

const testSecret = "0123456789abcdef0123456789abcdef"

func token(t testing.TB, scope string, exp time.Duration) string {
	t.Helper()
	claims := jwt.MapClaims{"sub": "test", "scope": scope, "iat": time.Now().Unix(), "exp": time.Now().Add(exp).Unix()}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// signedRecord is a record of a fresh agent with one skill, signed by its
// agent key and its peer key.
func signedRecord(t testing.TB, skill string, caps ...string) (*record.SignedAgent, *trust.Identity) {
	t.Helper()
	id, err := trust.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return signAgent(t, id, skill, 1, caps...), id
}

func signAgent(t testing.TB, id *trust.Identity, skill string, seq uint64, caps ...string) *record.SignedAgent {
	t.Helper()
	sk := record.Skill{SkillID: skill, Version: "1.2.0", SkillType: record.SkillTool, Endpoint: "10.0.0.9:8080", Scenes: []string{"auth"}}
	for _, c := range caps {
		sk.Capabilities = append(sk.Capabilities, record.Capability{ID: c})
	}
	a := &record.Agent{AgentName: "reg-agent", Capabilities: map[string]string{}, Transport: record.Transport{Type: "tcp", Endpoint: "10.0.0.9:9000"}, Skills: []record.Skill{sk}}
	a.Fill(id.AgentID, id.PeerID.String(), id.PublicKeyPEM(), seq, time.Now(), time.Hour)
	sa, err := record.Sign(a, id.AgentKey, id.PeerKey)
	if err != nil {
		t.Fatal(err)
	}
	return sa
}

func TestMirrorRegistry(t *testing.T) {
	clk := newClock()
	clk.t = time.Now()
	m := newMirror(t, seedCatalog(t), ServerOptions{JWTSecret: testSecret, RegistrationLease: time.Minute, Now: clk.Now})
	sa, id := signedRecord(t, "reg-skill", "cap-r", "org-data-read")
	body := string(sa.MarshalAnnounce())
	write, read := token(t, ScopeWrite, time.Hour), token(t, ScopeRead, time.Hour)

	for _, c := range []struct {
		name   string
		hdr    []string
		status int
		code   string
	}{
		{"no token", nil, 401, record.CodeAuth},
		{"not bearer", []string{"Authorization", "Basic eDp5"}, 401, record.CodeAuth},
		{"bad token", []string{"Authorization", "Bearer abc.def.ghi"}, 401, record.CodeAuth},
		{"expired", []string{"Authorization", "Bearer " + token(t, ScopeWrite, -time.Hour)}, 401, record.CodeAuth},
		{"read scope", []string{"Authorization", "Bearer " + read}, 403, record.CodeForbidden},
	} {
		resp, b := post(t, m.url+"/agents", body, c.hdr...)
		if e := apiErrOf(t, b); resp.StatusCode != c.status || e.Code != c.code {
			t.Errorf("%s: %d %s", c.name, resp.StatusCode, b)
		}
	}
	resp, b := post(t, m.url+"/agents", body, "Authorization", "Bearer "+write)
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"source":"registry"`) || resp.Header.Get("Location") != "/agents/"+sa.Agent.AgentID {
		t.Fatalf("register: %d %s", resp.StatusCode, b)
	}
	// Listed with a read token, filtered by capability; its skill joins
	// the catalog's answers.
	resp, b = get(t, m.url+"/agents?capability=cap-r", "Authorization", "Bearer "+read)
	var al AgentList
	if err := json.Unmarshal(b, &al); err != nil || resp.StatusCode != 200 || al.Total != 1 {
		t.Fatalf("list: %d %s", resp.StatusCode, b)
	}
	got, err := record.FromAnnounce(record.Announce{ProtocolVersion: al.Agents[0].ProtocolVersion, Agent: al.Agents[0].Agent, Signature: al.Agents[0].Signature, PeerSignature: al.Agents[0].PeerSignature})
	if err != nil || got.VerifySignatures() != nil || !bytes.Equal(got.Canonical(), sa.Canonical()) {
		t.Fatalf("the registry does not serve the signed record: %v", err)
	}
	resp, _ = get(t, m.url+"/agents?capability=nothing", "Authorization", "Bearer "+read)
	if resp.StatusCode != 200 {
		t.Fatal(resp.StatusCode)
	}
	resp, b = get(t, m.url+"/agents/"+sa.Agent.AgentID, "Authorization", "Bearer "+read)
	if resp.StatusCode != 200 {
		t.Fatalf("get: %d %s", resp.StatusCode, b)
	}
	resp, _ = get(t, m.url+"/agents", "Authorization", "Bearer "+write)
	if resp.StatusCode != 403 {
		t.Fatalf("list with a write-only token: %d", resp.StatusCode)
	}
	_, b = post(t, m.url+"/api/skills/search", `{"capabilities":["cap-r"]}`)
	l, _ := DecodeSkillList(b)
	if len(l.Skills) != 1 || l.Skills[0].ID != "reg-skill" || l.Skills[0].AgentID != sa.Agent.AgentID || l.Skills[0].Source != "registry" {
		t.Fatalf("registered skill not searchable: %s", b)
	}

	// Refusals: an older seq, another key for the same agent id, a
	// forged signature, an unsigned announce, a wrong content type.
	newer := signAgent(t, id, "reg-skill", 5, "cap-r")
	if resp, b := post(t, m.url+"/agents", string(newer.MarshalAnnounce()), "Authorization", "Bearer "+write); resp.StatusCode != 200 {
		t.Fatalf("newer record: %d %s", resp.StatusCode, b)
	}
	resp, b = post(t, m.url+"/agents", body, "Authorization", "Bearer "+write)
	if e := apiErrOf(t, b); resp.StatusCode != 409 || e.Code != record.CodeDuplicateID {
		t.Fatalf("older record: %d %s", resp.StatusCode, b)
	}
	thief, err := trust.Generate()
	if err != nil {
		t.Fatal(err)
	}
	thief.AgentID = id.AgentID
	stolen := signAgent(t, thief, "reg-skill", 9, "cap-r")
	resp, b = post(t, m.url+"/agents", string(stolen.MarshalAnnounce()), "Authorization", "Bearer "+write)
	if e := apiErrOf(t, b); resp.StatusCode != 409 || e.Code != record.CodeDuplicateID {
		t.Fatalf("another key: %d %s", resp.StatusCode, b)
	}
	forged := strings.Replace(string(newer.MarshalAnnounce()), `"signature":"`, `"signature":"AA`, 1)
	resp, b = post(t, m.url+"/agents", forged, "Authorization", "Bearer "+write)
	if resp.StatusCode != 400 {
		t.Fatalf("forged: %d %s", resp.StatusCode, b)
	}
	unsigned, _ := json.Marshal(map[string]any{"protocol_version": "v1.0", "agent": json.RawMessage(newer.Canonical())})
	resp, b = post(t, m.url+"/agents", string(unsigned), "Authorization", "Bearer "+write)
	if e := apiErrOf(t, b); resp.StatusCode != 400 || e.Field != "signature" {
		t.Fatalf("unsigned: %d %s", resp.StatusCode, b)
	}
	resp, b = post(t, m.url+"/agents", "{", "Authorization", "Bearer "+write, "Content-Type", "text/plain")
	if resp.StatusCode != 415 {
		t.Fatalf("content type: %d %s", resp.StatusCode, b)
	}

	// The lease ends without a new POST.
	if m.s.Registered() != 1 {
		t.Fatalf("registered %d", m.s.Registered())
	}
	clk.Advance(61 * time.Second)
	if m.s.Registered() != 0 {
		t.Fatal("the registration outlived its lease")
	}
	resp, _ = get(t, m.url+"/agents/"+sa.Agent.AgentID, "Authorization", "Bearer "+read)
	if resp.StatusCode != 404 {
		t.Fatalf("expired registration: %d", resp.StatusCode)
	}
}

func TestMirrorRegistryOff(t *testing.T) {
	m := newMirror(t, seedCatalog(t), ServerOptions{})
	sa, _ := signedRecord(t, "s", "c")
	resp, b := post(t, m.url+"/agents", string(sa.MarshalAnnounce()))
	if e := apiErrOf(t, b); resp.StatusCode != 404 || !strings.Contains(e.Message, "does not accept registrations") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if _, err := NewServer(m.s.Catalog(), ServerOptions{JWTSecret: "short"}); err == nil {
		t.Fatal("a short JWT secret was accepted")
	}
	if _, err := NewServer(m.s.Catalog(), ServerOptions{PublicURL: "ftp://x"}); err == nil {
		t.Fatal("a bad public URL was accepted")
	}
}
