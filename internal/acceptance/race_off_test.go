//go:build !race

package acceptance

const raceEnabled = false
