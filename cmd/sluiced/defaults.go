package main

import (
	"strconv"
	"strings"
	"time"
)

// The defaults of sluiced's flags. A flag that stands for a package's
// setting takes that package's default (its DefaultConfig, or the
// constant its Config names) in settings(), so that the value, and the
// reason it was chosen, are written once: in that package.
// TestFlagDefaultsArePackageDefaults checks each such flag against the
// value its package would use, and TestConfigurationDoc the defaults
// docs/configuration.md shows against `sluiced -h`.
//
// Two take a package's default by another road: -lease-ahead is half
// lease.Config's LeaseTTL, what a zero AheadHorizon means there (sluiced's
// 0 means none), and -rls-transport is rls.TransportLean, what
// rls.ServerConfig's zero Transport means.
//
// The defaults below are sluiced's own: settings no package has, or that
// sluiced sets where a package's zero value means something else. Every
// other flag's default is its setting's zero value (empty: none; false;
// 0).
const (
	// defaultListen is the HTTP API on every interface, on the port the
	// examples and deployment files use: gateways on other machines reach
	// it, while the admin API still answers loopback callers only until an
	// admin token is set (node.Config.AdminToken).
	defaultListen = ":8080"
	// defaultCheckBudget is 20ms: Envoy's rate-limit filter gives up on
	// its rate limit call after 20 ms, and other gateways' usual timeouts
	// are of that order, so a check decided by on_store_failure at 20 ms
	// still reaches its gateway in time. lease.Config.CheckBudget's zero
	// means none (a check waits as long as its Store call takes).
	defaultCheckBudget = 20 * time.Millisecond
	// defaultHotSplit splits hot keys: a key too hot for its one owner is
	// what splits are for (node/hot); false only detects and shows them.
	defaultHotSplit = true
	// defaultGCHeadroom is 25 (percent of the live heap, once that is more
	// than gcFloor): a node holding 1M keys keeps a resident set of about
	// 1.25× its live heap instead of Go's 2× (TestNodeMemoryPerKey in
	// bench: 133–137 B per key on the memory store, under its 150 B
	// budget), for more frequent collections while the heap grows: a
	// first touch costs 6–9 µs more node CPU, a check of a known key no
	// measurable more (bench/testdata/gc-cpu.sh; gc.go has the policy).
	defaultGCHeadroom = 25
	// defaultLogLevel logs starts, stops, reloads, membership changes and
	// failures, never a line per check.
	defaultLogLevel = "info"
)

// durationText is d as a flag default: time.Duration's String without
// its trailing zero units ("5m", not "5m0s"), and 0 as "0".
func durationText(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// floatText is f as a flag default ("0", "0.25").
func floatText(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
