package main

import (
	"io"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/forward"
	"github.com/sluicehq/sluice/node/hot"
	"github.com/sluicehq/sluice/node/member"
	"github.com/sluicehq/sluice/node/rls"
	"github.com/sluicehq/sluice/node/upstream"
)

// TestFlagDefaultsArePackageDefaults: with no flag and no variable set,
// sluiced runs each package's setting at that package's default, and its
// own settings at the defaults of defaults.go. A flag with a default that
// is neither (a literal written into settings()) fails the test: every
// flag's default is one of those, or its setting's zero value.
func TestFlagDefaultsArePackageDefaults(t *testing.T) {
	o, err := parseOptions(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	lc, mc, hc := lease.DefaultConfig(), member.DefaultConfig(), hot.DefaultConfig()
	// The value sluiced runs with by default, and the one it stands for.
	stands := map[string][2]any{
		// A package's default.
		"gossip":             {o.gossip, mc.BindAddr},
		"cluster-size":       {o.clusterSize, mc.ClusterSize},
		"internal-window":    {o.internalWindow, forward.DefaultWindow},
		"forward-timeout":    {o.forwardTimeout, forward.DefaultConfig().Timeout},
		"lease-horizon":      {o.leaseHorizon, lc.Horizon},
		"lease-idle":         {o.leaseIdle, lc.Idle},
		"lease-keep-idle":    {o.leaseKeepIdle, lc.KeepIdle},
		"lease-ahead":        {o.leaseAhead, lc.LeaseTTL / 2}, // a zero AheadHorizon's meaning
		"store-timeout":      {o.storeTimeout, lc.StoreTimeout},
		"rules-poll":         {o.rulesPoll, node.DefaultRulesPoll},
		"rls-transport":      {o.rlsTransport, rls.TransportLean},
		"rls-max-conns":      {o.rlsMaxConns, rls.DefaultMaxConns},
		"rls-idle-timeout":   {o.rlsIdleTimeout, rls.DefaultIdleTimeout},
		"hot-capacity-share": {o.hotCapacityShare, hc.CapacityShare},
		"upstream-rtt":       {o.upstreamRTT, upstream.Config{}.RTT},
		// sluiced's own.
		"listen":       {o.listen, defaultListen},
		"check-budget": {o.checkBudget, defaultCheckBudget},
		"hot-split":    {o.hotSplit, defaultHotSplit},
		"gc-headroom":  {o.gcHeadroom, defaultGCHeadroom},
		"log-level":    {o.logLevel, slog.LevelInfo},
	}
	for flag, v := range stands {
		if !reflect.DeepEqual(v[0], v[1]) {
			t.Errorf("-%s: default %v, want %v (the default it stands for)", flag, v[0], v[1])
		}
	}
	// The package defaults are not zero: a flag whose default is zero is
	// not standing for one of them by accident.
	if lc.Horizon == 0 || lc.StoreTimeout == 0 || forward.DefaultWindow == 0 || mc.BindAddr == "" {
		t.Fatalf("package defaults unset: %+v", lc)
	}
	for _, s := range settings() {
		if _, ok := stands[s.flag]; ok {
			continue
		}
		switch s.def {
		case "", "false", "0":
		default:
			t.Errorf("-%s: default %q is neither a package's default nor one of sluiced's own (defaults.go): add it to this test's table", s.flag, s.def)
		}
	}
}

// TestDurationText: durations print as the flags' defaults always did.
func TestDurationText(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0", 20 * time.Millisecond: "20ms", time.Second: "1s", 150 * time.Second: "2m30s",
		5 * time.Minute: "5m", 24 * time.Hour: "24h", 90 * time.Minute: "1h30m",
	} {
		if got := durationText(d); got != want {
			t.Errorf("durationText(%v) = %q, want %q", d, got, want)
		}
		if got, err := time.ParseDuration(durationText(d)); d != 0 && (err != nil || got != d) {
			t.Errorf("%q parses as %v, %v; want %v", durationText(d), got, err, d)
		}
	}
}
