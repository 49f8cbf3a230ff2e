//go:build !race

package racebuild

// Enabled is true in a race-detector build (go test -race).
const Enabled = false
