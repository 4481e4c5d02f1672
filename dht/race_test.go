//go:build race

package dht

const raceEnabled = true
