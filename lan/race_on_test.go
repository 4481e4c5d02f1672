//go:build race

package lan

const raceEnabled = true
