//go:build race

package store

// raceEnabled reports a -race build, whose shadow memory makes RSS figures
// meaningless.
const raceEnabled = true
