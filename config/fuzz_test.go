package config

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzParse checks that any input either fails with FieldErrors naming the
// file, or yields a valid configuration whose YAML form parses back to the
// same configuration.
func FuzzParse(f *testing.F) {
	seed, err := os.ReadFile(filepath.Join("testdata", "seed-001.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	def, err := Default().YAML()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(def)
	f.Add([]byte("listen: []\ntrust:\n  policy: allowlist\n  allowList: [0b3c4d5e-6f70-4182-9a3b-4c5d6e7f8091]\n"))
	f.Add([]byte("discovery:\n  dht:\n    bootstrapNodes:\n      - multiaddr: /ip4/192.0.2.1/tcp/4777\n"))
	f.Add([]byte("cache: {ttl: 1m, refreshBeforeExpiry: 1500}\n"))
	f.Add([]byte("a: &x [1]\nb: *x\n"))
	f.Add([]byte("connections: {lowWater: 8, highWater: 16, gracePeriod: 30s}\n"))
	f.Add([]byte("nat:\n  reachability: public\n  announce: [/ip4/198.51.100.7/tcp/4777]\n  connsPerIP: 8\n  relay: {enabled: true, maxReservations: 10, connDuration: 5m, connData: 1MiB}\ndiscovery:\n  dht:\n    mode: client\n    bootstrapNodes:\n      - multiaddr: /dnsaddr/bootstrap.example.org\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data)
		if err != nil {
			fes := FieldErrors(err)
			if len(fes) == 0 {
				t.Fatalf("error is not a FieldError: %v", err)
			}
			for _, fe := range fes {
				if fe.File != "fuzz.yaml" || fe.Reason == "" {
					t.Fatalf("FieldError without file or reason: %#v", fe)
				}
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse returned an invalid config: %v", err)
		}
		y, err := c.YAML()
		if err != nil {
			t.Fatalf("YAML: %v", err)
		}
		back, err := Parse("again.yaml", y)
		if err != nil {
			t.Fatalf("re-parse of\n%s\nfailed: %v", y, err)
		}
		if !reflect.DeepEqual(back, c) {
			t.Fatalf("round trip changed the config:\n%#v\n%#v", c, back)
		}
	})
}

// FuzzParseDuration checks that a parsed duration formats to a string that
// parses back to the same value.
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"5000", "0", "-250", "5s", "1m30s", "1.5h", "300ms", "2562047h47m16.854775807s", "9223372036854"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			return
		}
		back, err := ParseDuration(d.String())
		if err != nil {
			t.Fatalf("ParseDuration(%q) = %v, whose String %q does not parse: %v", s, d, d.String(), err)
		}
		if back != d {
			t.Fatalf("ParseDuration(%q) = %v, round trip gives %v", s, d, back)
		}
	})
}
