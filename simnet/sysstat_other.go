//go:build !unix

package simnet

// cpuSeconds is not measured on this platform.
func cpuSeconds() float64 { return 0 }

// rssBytes is not measured on this platform.
func rssBytes() int64 { return 0 }
