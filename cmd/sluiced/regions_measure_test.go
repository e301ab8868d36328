package main

// The regions' measurements (docs/regions.md): a global tier and three
// regions in this process, each region's link to the global tier through
// a loopback proxy adding an 80 ms round trip. They take about a minute
// and their figures depend on the machine, so they run only when -run
// names TestRegionsMeasure or SLUICE_REGIONS=1 is set:
//
//	SLUICE_REGIONS=1 go test -count=1 -run TestRegionsMeasure -v ./cmd/sluiced/
//
// SLUICE_REGIONS_SECONDS sets the length of the split's run (default 60).

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench/pace"
	"github.com/sluicehq/sluice/node/member/netsim"
)

func regionsWanted() bool {
	if os.Getenv("SLUICE_REGIONS") == "1" {
		return true
	}
	f := flag.Lookup("test.run")
	return f != nil && strings.Contains(f.Value.String(), "TestRegionsMeasure")
}

// The measurements' rules: split is a saturated global key's (300/s),
// fast a global and a region rule that never deny.
const measureGlobalRules = `rules:
  - name: split
    algorithm: token_bucket
    limit: 300
    period: 1s
    scope: global
  - name: fast-global
    algorithm: token_bucket
    limit: 1000000000
    period: 1s
    scope: global
`

const measureRegionRules = measureGlobalRules + `  - name: fast-region
    algorithm: token_bucket
    limit: 1000000000
    period: 1s
`

// startMeasureTiers starts the global tier and three regions, each
// behind a proxy delaying oneWay each way.
func startMeasureTiers(t *testing.T, oneWay time.Duration) []*regionNode {
	t.Helper()
	global, err := startRegionNode(t, measureGlobalRules, "-client-token", upstreamToken)
	if err != nil {
		t.Fatal(err)
	}
	var nodes []*regionNode
	for i := range 3 {
		p, err := netsim.NewProxy(global.d.ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		p.SetDelay(oneWay)
		t.Cleanup(func() { p.Close() })
		n, err := startRegionNode(t, measureRegionRules, "-upstream", "http://"+p.Addr(), "-upstream-token", upstreamToken,
			"-region", "region-"+strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	return nodes
}

func TestRegionsMeasure(t *testing.T) {
	if !regionsWanted() {
		t.Skip("the regions' measurements run when -run names TestRegionsMeasure or SLUICE_REGIONS=1 (see docs/regions.md)")
	}
	nodes := startMeasureTiers(t, 40*time.Millisecond)

	t.Run("latency", func(t *testing.T) {
		// One region's checks of a global rule (leased across the 80 ms
		// link) and of a region rule (its own Store), interleaved, on
		// keys whose tokens it holds: the first check of each key, which
		// waits for its first lease, is left out.
		n := nodes[0]
		const keys, rounds = 10, 5000
		for k := range keys {
			for _, rule := range []string{"fast-global", "fast-region"} {
				if st, m := n.check(t, rule, "k"+strconv.Itoa(k), 1); st != http.StatusOK {
					t.Fatalf("warm-up %s: %d %v", rule, st, m)
				}
			}
		}
		lat := map[string][]time.Duration{}
		for i := range rounds {
			for _, rule := range []string{"fast-global", "fast-region"} {
				start := time.Now()
				if st, m := n.check(t, rule, "k"+strconv.Itoa(i%keys), 1); st != http.StatusOK {
					t.Fatalf("%s: %d %v", rule, st, m)
				}
				lat[rule] = append(lat[rule], time.Since(start))
			}
		}
		q := func(rule string, f float64) time.Duration {
			s := lat[rule]
			slices.Sort(s)
			return s[min(int(f*float64(len(s))), len(s)-1)]
		}
		for _, rule := range []string{"fast-global", "fast-region"} {
			t.Logf("%-11s p50 %v  p99 %v  p99.9 %v  max %v (%d checks over HTTP)", rule,
				q(rule, 0.5), q(rule, 0.99), q(rule, 0.999), q(rule, 1), len(lat[rule]))
		}
		if d := q("fast-global", 0.99) - q("fast-region", 0.99); d > time.Millisecond {
			t.Errorf("p99 of a global rule's checks is %v above a region rule's, want at most 1ms", d)
		}
	})

	t.Run("split", func(t *testing.T) {
		// Demand 60/30/10% of twice the key's rate, past saturation.
		secs := 60
		if v, err := strconv.Atoi(os.Getenv("SLUICE_REGIONS_SECONDS")); err == nil && v > 0 {
			secs = v
		}
		const rate = 300
		demand := []float64{360, 180, 60}
		admitted := make([]atomic.Int64, 3)
		var errs, lastOK atomic.Int64 // lastOK: Unix ns of the last admitted check
		start := time.Now()
		var loads []*pace.Load
		for i, d := range demand {
			n := nodes[i]
			loads = append(loads, pace.Start(pace.Config{Workers: 64, Rate: d, Max: time.Duration(secs) * time.Second},
				func(int, int) {
					res, err := http.Post(n.base+"/v1/check", "application/json", strings.NewReader(`{"rule":"split","key":"hot"}`))
					if err != nil {
						errs.Add(1)
						return
					}
					res.Body.Close()
					switch res.StatusCode {
					case http.StatusOK:
						admitted[i].Add(1)
						lastOK.Store(time.Now().UnixNano())
					case http.StatusTooManyRequests:
					default:
						errs.Add(1)
					}
				}))
		}
		for _, l := range loads {
			<-l.Done()
		}
		// The allowance: the bucket's burst, plus its refill until the last
		// admitted check (the loads' last rounds may end after their time).
		elapsed := time.Unix(0, lastOK.Load()).Sub(start)
		allowance := float64(rate) + rate*elapsed.Seconds()
		var total int64
		for i := range admitted {
			total += admitted[i].Load()
		}
		var shares []string
		for i := range admitted {
			shares = append(shares, fmt.Sprintf("%.1f%%", 100*float64(admitted[i].Load())/float64(total)))
		}
		t.Logf("admitted %d of %.0f (%.1f%%) in %v, split %s (demand 60/30/10%%), %d errors",
			total, allowance, 100*float64(total)/allowance, elapsed.Round(time.Millisecond), strings.Join(shares, " / "), errs.Load())
		if errs.Load() > 0 {
			t.Errorf("%d checks failed or answered neither 200 nor 429", errs.Load())
		}
		if f := float64(total) / allowance; f < 0.95 || f > 1 {
			t.Errorf("admitted %.1f%% of the allowance, want [95%%, 100%%]", 100*f)
		}
		for i, d := range demand {
			share, want := float64(admitted[i].Load())/float64(total), d/600
			if share < want-0.10 || share > want+0.10 {
				t.Errorf("region %d admitted %.1f%% of the total, its demand is %.0f%%: want within 10 points", i, 100*share, 100*want)
			}
		}
	})
}
