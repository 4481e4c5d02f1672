package store

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// Badger's cache monitor advises a larger block cache every minute under a
// write load; agentd keeps that at debug level. Its other warnings stay
// warnings.
func TestBadgerCacheAdviceIsDebug(t *testing.T) {
	var buf bytes.Buffer
	l := badgerLogger{slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	// The formats of Badger v4.9.6's db.monitorCache.
	l.Warningf("%s might be too small. Metrics: %s\n", "Block cache", "hit: 1 miss: 99")
	l.Warningf("Cache life expectancy (in seconds): %+v\n", "histogram")
	if buf.Len() != 0 {
		t.Fatalf("cache advice logged at warn: %s", buf.String())
	}
	l.Warningf("another warning about %s\n", "a table")
	if !strings.Contains(buf.String(), "level=WARN") || !strings.Contains(buf.String(), "another warning about a table") {
		t.Fatalf("another warning was not logged at warn: %q", buf.String())
	}
}
