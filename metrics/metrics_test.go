package metrics_test

import (
	"slices"
	"testing"

	"github.com/agentd/agentd/gossip"
	"github.com/agentd/agentd/metrics"
)

// Labelled series a dashboard plots exist from the start, with zeros:
// /metrics lists agentd_gossip_delivered_total for every gossip message
// type before the first message arrives.
func TestSeriesExistBeforeTheirFirstEvent(t *testing.T) {
	m := metrics.New(false)
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	types := map[string][]string{}
	for _, f := range fams {
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "type" {
					types[f.GetName()] = append(types[f.GetName()], l.GetValue())
				}
			}
		}
	}
	for _, name := range []string{"agentd_gossip_delivered_total", "agentd_gossip_published_total"} {
		got := types[name]
		slices.Sort(got)
		want := []string{gossip.KindAnnounce, gossip.KindHeartbeat, gossip.KindStatus, gossip.KindUnregister, gossip.KindBeats, gossip.KindWanted}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s types %v, want %v", name, got, want)
		}
	}
}
