//go:build !linux

package main

// physicalMemory is not known on this platform.
func physicalMemory() uint64 { return 0 }
