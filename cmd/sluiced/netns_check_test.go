//go:build netns

package main

// The checker of the partition table: every answer the client recorded,
// against the bound of its store and mode (docs/faults.md, "Partitions").

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/shard"
)

// nsShare is a minority's share of nsLimit on three members.
const nsShare = nsLimit / 3

type nsKeyStat struct {
	admitted, preCut, atCutNode, atCutNodeLate int
	// fellBack: the nodes that admitted the key degraded (decided
	// without its owner, within their share on the memory store).
	fellBack [3]bool
}

func nsCheck(t *testing.T, row nsRow, cfg *nsConfig, res *nsResult, cut, heal time.Time, nodes []*daemonProc) {
	t.Helper()
	modes := []string{"local", "open", "closed"}
	var fivexx [3]int
	unanswered, degradedLocal := 0, 0
	keys := map[[2]int]*nsKeyStat{}
	where := map[string]int{} // 5xx by mode, node and phase
	ring := shard.NewRing([]string{"n1", "n2", "n3"}, shard.DefaultVnodes)
	var first, last int64
	for _, r := range res.Recs {
		if first == 0 || r.T < first {
			first = r.T
		}
		last = max(last, r.T)
		mode := r.R % 3
		if row.spray {
			mode = 0
		}
		if r.D < 0 {
			unanswered++
			continue
		}
		if r.S >= 500 {
			fivexx[mode]++
			ph := 0
			switch {
			case cut.IsZero():
			case r.T >= heal.UnixNano():
				ph = 2
			case r.T >= cut.UnixNano():
				ph = 1
			}
			where[fmt.Sprintf("%s@n%d/%s", modes[mode], r.N+1, []string{"before", "during", "after"}[ph])]++
		}
		if r.G && mode == 0 {
			degradedLocal++
		}
		k := keys[[2]int{r.R, r.K}]
		if k == nil {
			k = &nsKeyStat{}
			keys[[2]int{r.R, r.K}] = k
		}
		if r.S == 200 && r.A {
			k.admitted++
			if r.G {
				k.fellBack[r.N] = true
			}
			if !cut.IsZero() && r.T < cut.UnixNano() {
				k.preCut++
			}
			if row.cut >= 0 && r.N == row.cut && r.T >= cut.UnixNano() && r.T < heal.UnixNano() {
				k.atCutNode++
				if r.T >= cut.Add(nsReadyMax).UnixNano() {
					k.atCutNodeLate++
				}
			}
		}
	}
	span := time.Duration(last - first)
	limit := nsLimit
	if row.spray {
		limit = 100
	}
	// The worst key of the local and closed rules, and of the open ones,
	// as admitted / limit; and the bound broken, if any.
	var worst, worstOpen float64
	var worstKey string
	minorityOver, majorityFell := 0, 0
	var keptWorst, lostWorst float64 // memory: keys the majority owned, keys the cut node owned
	for rk, k := range keys {
		r, key := rk[0], rk[1]
		name := cfg.Rules[r] + ":" + keyName(cfg.Prefix, key)
		ratio := float64(k.admitted) / float64(limit)
		if !row.spray && r%3 == 1 {
			worstOpen = max(worstOpen, ratio)
			continue
		}
		if ratio > worst {
			worst, worstKey = ratio, fmt.Sprintf("%s owned by %s: %d before the cut, %d at the cut node during it", name, ring.Owner(name), k.preCut, k.atCutNode)
		}
		bound := limit
		if !row.spray && r/3 == 1 { // token_bucket: the refill over the run
			bound += int(float64(limit)*span.Seconds()/nsPeriod.Seconds()) + 1
		} else {
			// fixed_window: a run that crosses the top of the hour
			// meets a fresh window, a whole limit more (a row started
			// at 06:59:40 admitted 1050 of 1000 and looked like a bug).
			bound += limit * nsWindowsCrossed(first, last, nsPeriod)
		}
		if row.storeCut && r%3 == 0 {
			// A node cut off from the Store decides its keys from its
			// memory (local) while its peers, whose forwards to it time
			// out, lease them from the Store: at most one window over,
			// charged to the Store when it is back (docs/faults.md).
			bound += limit
		}
		if !row.redis {
			// Each node that decided the key without its owner, within
			// its share: the far side of the cut, and any other whose
			// forwards timed out (a loaded machine).
			owner := ring.Owner(name)
			fell := 0
			for n, f := range k.fellBack {
				if (f || (n == row.cut && k.atCutNode > 0)) && fmt.Sprintf("n%d", n+1) != owner {
					fell++
					if n != row.cut && row.cut >= 0 && owner != fmt.Sprintf("n%d", row.cut+1) {
						majorityFell++
					}
				}
			}
			if row.cut >= 0 && owner == fmt.Sprintf("n%d", row.cut+1) {
				// Its owner was cut off: what it admitted before the cut
				// went with it, and so did its share while cut off; of
				// the majority, the node the key moves to counts what it
				// decided for it in its limit, the other its share.
				bound += k.preCut + nsShare + nsShare*min(fell, 1)
				lostWorst = max(lostWorst, ratio)
			} else {
				bound += nsShare * fell
				keptWorst = max(keptWorst, ratio)
			}
			if row.cut >= 0 && k.atCutNodeLate > nsShare {
				minorityOver++
				t.Errorf("%s: the minority admitted %d after it knew, over its share %d", name, k.atCutNodeLate, nsShare)
			}
		}
		if k.admitted > bound {
			t.Errorf("%s: admitted %d, over its bound %d", name, k.admitted, bound)
		}
	}
	for m, n := range fivexx {
		// open rules may answer 503 nowhere, but are not this table's
		// subject; closed ones answer 503 by definition while their node
		// cannot reach the Store (the redis-cut row).
		if n > 0 && (m == 0 || (m == 2 && !row.storeCut) || row.spray) {
			t.Errorf("%d answers 5xx for %s rules", n, modes[m])
		}
	}
	// Readiness of the cut node, and of the others during the cut.
	ready := "n/a"
	if row.cut >= 0 {
		lost, back := readiness(res.Obs, row.cut, cut, heal)
		ready = fmt.Sprintf("not ready %s after the cut, ready %s after the heal", msec(lost), msec(back))
		if lost < 0 || lost > nsReadyMax+100*time.Millisecond {
			t.Errorf("n%d: not ready %s after the cut, want within %s", row.cut+1, msec(lost), nsReadyMax)
		}
		if back > nsReadyMax+100*time.Millisecond {
			t.Errorf("n%d: ready again %s after the heal, want within %s", row.cut+1, msec(back), nsReadyMax)
		}
	}
	notReady := 0
	for _, o := range res.Obs {
		if !o.Stats && o.N != row.cut && o.S != 200 && !cut.IsZero() && o.T >= cut.UnixNano() && o.T < heal.UnixNano() {
			notReady++
		}
	}
	var partial []string
	for _, n := range row.sides {
		saw := false
		for _, o := range res.Obs {
			if o.Stats && o.N == n && o.Partial && o.T >= cut.Add(nsReadyMax).UnixNano() && o.T < heal.UnixNano() {
				saw = true
			}
		}
		partial = append(partial, fmt.Sprintf("n%d %v", n+1, saw))
		if !saw {
			t.Errorf("n%d: /v1/stats never partial during the cut", n+1)
		}
	}
	var logs []string
	dir := os.Getenv("SLUICE_NETNS_LOGS")
	for i, p := range nodes {
		lg := p.log()
		if dir != "" {
			d := filepath.Join(dir, strings.ReplaceAll(row.name, "/", "-"))
			_ = os.MkdirAll(d, 0o755)
			_ = os.WriteFile(filepath.Join(d, fmt.Sprintf("n%d.log", i+1)), []byte(lg), 0o644)
		}
		logs = append(logs, fmt.Sprintf("n%d: %d minority, %d not answering, %d breaker lines", i+1,
			strings.Count(lg, "minority"), strings.Count(lg, "not answering"), strings.Count(lg, "store breaker")))
	}
	t.Logf("partition row: | %s | %d checks, %d unanswered | %d / %d / %d | %.2f× (%s) | %.2f× | %d keys | %s | %d | %s |",
		row.name, len(res.Recs), unanswered, fivexx[0], fivexx[1], fivexx[2], worst, worstKey, worstOpen,
		minorityOver, ready, notReady, strings.Join(partial, ", "))
	t.Logf("columns: row | checks | 5xx local / open / closed | worst key admitted / limit (local, closed) | open | keys over the minority's share | the cut node's readiness | not-ready answers of the others during the cut | /v1/stats partial")
	if !row.redis {
		t.Logf("memory: worst key the cut node did not own %.2f× the limit, worst it owned %.2f×; %d keys the majority owned decided by a majority node without their owner (a forward that timed out)",
			keptWorst, lostWorst, majorityFell)
	}
	t.Logf("%d local answers degraded; 5xx by rule mode, node and phase: %v; logs: %s", degradedLocal, where, strings.Join(logs, "; "))
}

// readiness returns how long after cut node n's /readyz first answered
// other than 200, and how long after heal it answered 200 for good.
func readiness(obs []nsObs, n int, cut, heal time.Time) (lost, back time.Duration) {
	lost = -1
	var lastBad, firstGoodAfter int64
	for _, o := range obs {
		if o.Stats || o.N != n {
			continue
		}
		if o.S != 200 && o.T >= cut.UnixNano() {
			if lost < 0 || time.Duration(o.T-cut.UnixNano()) < lost {
				lost = time.Duration(o.T - cut.UnixNano())
			}
			lastBad = max(lastBad, o.T)
		}
	}
	for _, o := range obs {
		if !o.Stats && o.N == n && o.S == 200 && o.T > lastBad && (firstGoodAfter == 0 || o.T < firstGoodAfter) {
			firstGoodAfter = o.T
		}
	}
	if firstGoodAfter == 0 {
		return lost, time.Hour
	}
	return lost, max(time.Duration(firstGoodAfter-heal.UnixNano()), 0)
}

// nsWindowsCrossed is how many window boundaries (multiples of period
// since the Unix epoch, as fixed_window aligns them) lie in (first, last],
// times in Unix nanoseconds.
func nsWindowsCrossed(first, last int64, period time.Duration) int {
	return int(last/int64(period) - first/int64(period))
}

func TestNsWindowsCrossed(t *testing.T) {
	h := int64(time.Hour)
	for _, c := range []struct {
		first, last int64
		want        int
	}{
		{10 * h, 10*h + h - 1, 0},     // one whole window
		{10*h - 20e9, 10*h + 20e9, 1}, // 40 s across the top of the hour
		{10*h - 1, 10 * h, 1},         // the boundary itself belongs to the new window
		{10 * h, 12*h + 1, 2},
	} {
		if got := nsWindowsCrossed(c.first, c.last, time.Hour); got != c.want {
			t.Errorf("nsWindowsCrossed(%d, %d) = %d, want %d", c.first, c.last, got, c.want)
		}
	}
}
