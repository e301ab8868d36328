package lua

// The Redis rows of the fault table of docs/faults.md: a lease.Manager
// on a standalone Redis under the load of faultload_test.go while Redis is
// killed, paused, frozen or slowed. Each row is one subtest that prints its
// figures with -v, for example
//
//	go test -count=1 -run 'TestFault/redis-kill' -v ./lua/
//
// They take 5–15 s each, so they run only when -run names TestFault or
// SLUICE_FAULTS=1 is set; the failover rows (failover_test.go) and the
// breaker's own tests always run.

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lua/redistest"
)

// faultsWanted reports whether the fault rows should run: -run names
// TestFault, or SLUICE_FAULTS=1.
func faultsWanted() bool {
	if os.Getenv("SLUICE_FAULTS") == "1" {
		return true
	}
	f := flag.Lookup("test.run")
	return f != nil && strings.Contains(f.Value.String(), "TestFault")
}

// faultBudget is the rows' lease.Config.CheckBudget, sluiced's default.
const faultBudget = 20 * time.Millisecond

func TestFault(t *testing.T) {
	if !faultsWanted() {
		t.Skip("fault rows run when -run names TestFault or SLUICE_FAULTS=1 (see docs/faults.md)")
	}
	rows := []struct {
		name string
		// fault breaks Redis and, returning, ends the fault (the fault's
		// duration is its own; nothing is asserted after a sleep). Its
		// time.Sleep is the fault's length: a real redis-server stays
		// down that long, in real time, while the paced load measures it.
		fault func(t *testing.T, srv *redistest.Server, p *delayProxy)
	}{
		{"redis-kill", func(t *testing.T, srv *redistest.Server, _ *delayProxy) {
			srv.Kill()
			time.Sleep(5 * time.Second) // the fault lasts this long (real time)
			srv.Restart()
		}},
		{"pause-5s", func(t *testing.T, srv *redistest.Server, _ *delayProxy) {
			srv.Pause()
			time.Sleep(5 * time.Second) // the fault lasts this long (real time)
			srv.Resume()
		}},
		{"freeze-100ms", func(t *testing.T, srv *redistest.Server, _ *delayProxy) {
			srv.Pause()
			time.Sleep(100 * time.Millisecond) // the fault lasts this long (real time)
			srv.Resume()
		}},
		{"latency-30ms", func(t *testing.T, _ *redistest.Server, p *delayProxy) {
			p.SetDelay(30 * time.Millisecond)
			time.Sleep(5 * time.Second) // the fault lasts this long (real time)
			p.SetDelay(0)
		}},
		{"latency-200ms", func(t *testing.T, _ *redistest.Server, p *delayProxy) {
			p.SetDelay(200 * time.Millisecond)
			time.Sleep(5 * time.Second) // the fault lasts this long (real time)
			p.SetDelay(0)
		}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			p := startDelayProxy(t, srv.Addr)
			// sluiced's default check budget: the most a Store fault may
			// add to a check.
			m := newManager(t, newTestStore(t, p.Addr), lease.Config{CheckBudget: faultBudget})
			l := startFaultLoad(t, m, func(i int64) string { return fmt.Sprintf("fresh-%d", i) }, "lim")
			l.waitChecks(2 * faultPairs) // a second's worth of baseline

			l.Inject()
			row.fault(t, srv, p)
			l.Heal()
			recovery := l.WaitRecovered()
			r := l.Row(row.name, recovery)
			r.budget = faultBudget
			r.check(t)
		})
	}
}
