package simnet

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestScenarioEnv runs one scenario in virtual time from $SIMNET_RUN, for
// the scale measurements of docs/simnet.md, e.g.
//
//	SIMNET_RUN=nodes=250,duration=2m,kind=churn go test -run TestScenarioEnv -v -timeout 60m ./simnet
func TestScenarioEnv(t *testing.T) {
	spec := os.Getenv("SIMNET_RUN")
	if spec == "" {
		t.Skip("set SIMNET_RUN=nodes=N,duration=D[,kind=K][,seed=S][,rate=R][,interval=I][,fraction=F] to run a scenario in virtual time")
	}
	s := Scenario{Seed: 1}
	for _, kv := range strings.Split(spec, ",") {
		k, v, _ := strings.Cut(kv, "=")
		var err error
		switch k {
		case "nodes":
			s.Nodes, err = strconv.Atoi(v)
		case "duration":
			s.Duration, err = time.ParseDuration(v)
		case "kind":
			s.Kind, err = ParseKind(v)
		case "seed":
			s.Seed, err = strconv.ParseUint(v, 10, 64)
		case "rate":
			s.QueryRate, err = strconv.ParseFloat(v, 64)
		case "interval":
			s.ChurnInterval, err = time.ParseDuration(v)
		case "fraction":
			s.ChurnFraction, err = strconv.ParseFloat(v, 64)
		default:
			t.Fatalf("unknown key %q in SIMNET_RUN", k)
		}
		if err != nil {
			t.Fatalf("SIMNET_RUN %s: %v", kv, err)
		}
	}
	wall := time.Now()
	bubble(t, func(t *testing.T) {
		rep, err := s.Run(context.Background())
		if err != nil {
			t.Error(err)
		}
		if rep == nil {
			return
		}
		var b strings.Builder
		_ = rep.WriteText(&b)
		t.Log("\n" + b.String())
		if path := os.Getenv("SIMNET_JSON"); path != "" {
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := rep.WriteJSON(f); err != nil {
				t.Error(err)
			}
			if err := f.Close(); err != nil {
				t.Error(err)
			}
		}
	})
	t.Logf("wall time %s", time.Since(wall))
}
