package lua

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lua/redistest"
)

// BenchmarkScriptCost measures what the lease scripts cost Redis: the CPU
// of one lease call inside Redis (INFO commandstats' usec per EVALSHA,
// which includes the commands the script runs) and the memory of one
// counter key (used_memory over many keys). Each key is leased the way a
// Manager leases it: a first call, then a renewal that says what the
// holder still holds and had spent. Holders 1 and 3: three Managers
// leasing the same keys.
//
//	go test ./lua/ -run '^$' -bench ScriptCost -benchtime 1x
//
// SLUICE_COST_KEYS sets the keys per run (default 20,000).
func BenchmarkScriptCost(b *testing.B) {
	keys := 20_000
	if v, err := strconv.Atoi(os.Getenv("SLUICE_COST_KEYS")); err == nil && v > 0 {
		keys = v
	}
	srv := redistest.StartServer(b)
	// Every call its own script call: the cost of one.
	s, err := NewStore(Config{Addrs: []string{srv.Addr}, CallTimeout: testTimeout, MaxBatch: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for _, a := range []lease.Algorithm{lease.TokenBucket, lease.GCRA, lease.FixedWindow, lease.SlidingWindow} {
		for _, holders := range []int{1, 3} {
			b.Run(fmt.Sprintf("%v/holders=%d", a, holders), func(b *testing.B) {
				for b.Loop() {
					us, bytes := scriptCost(b, srv, s, a, keys, holders)
					b.ReportMetric(us, "redis-µs/call")
					b.ReportMetric(bytes, "B/key")
				}
			})
		}
	}
}

func scriptCost(b *testing.B, srv *redistest.Server, s *Store, a lease.Algorithm, keys, holders int) (usPerCall, bytesPerKey float64) {
	p := lease.Policy{Algorithm: a, Limit: 1000, Period: time.Hour}
	ctx := context.Background()
	// Load the script first: a NOSCRIPT answer would count as a call.
	if _, err := s.Lease(ctx, "warm", p, 1, 1, lease.Lessee{}); err != nil {
		b.Fatal(err)
	}
	// SYNC: Valkey 8 frees a flushed keyspace in the background by
	// default (lazyfree-lazy-user-flush yes), and used_memory read at once
	// would still count some of it.
	srv.Do("FLUSHALL", "SYNC")
	mem0 := infoField(b, srv, "memory", "used_memory")
	srv.Do("CONFIG", "RESETSTAT")
	// 64 callers: the auto-pipelined load of a busy node.
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := w; k < keys; k += 64 {
				key := fmt.Sprintf("user-%06d", k)
				for h := range holders {
					to := lease.Lessee{ID: fmt.Sprintf("m-%032x", h+1), TTL: 5 * time.Minute, Idle: time.Second, Call: uint32(2*k + 1)}
					if _, err := s.Lease(ctx, key, p, 10, 1, to); err != nil {
						errs <- err
						return
					}
					to.Held, to.SpentBefore, to.Idle, to.Call = 3, 7, 0, uint32(2*k+2)
					if _, err := s.Lease(ctx, key, p, 10, 1, to); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	mem1 := infoField(b, srv, "memory", "used_memory")
	if mem1 <= mem0 {
		b.Fatalf("used_memory went from %.0f to %.0f over %d new keys", mem0, mem1, keys)
	}
	calls, usec := evalStats(b, srv)
	if calls != int64(2*keys*holders) {
		b.Fatalf("%d script calls, want %d", calls, 2*keys*holders)
	}
	return usec / float64(calls), (mem1 - mem0) / float64(keys)
}

// infoField reads one numeric field of INFO section.
func infoField(b testing.TB, srv *redistest.Server, section, field string) float64 {
	for _, line := range strings.Split(srv.Do("INFO", section), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO %s %s: %q", section, field, v)
			}
			return f
		}
	}
	b.Fatalf("INFO %s: no %s", section, field)
	return 0
}

// evalStats is the calls and µs of the script commands (EVALSHA, and EVAL
// when a script was not loaded yet) since the last CONFIG RESETSTAT.
func evalStats(b testing.TB, srv *redistest.Server) (calls int64, usec float64) {
	for _, line := range strings.Split(srv.Do("INFO", "commandstats"), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
			continue
		}
		_, fields, _ := strings.Cut(line, ":")
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "calls":
				n, _ := strconv.ParseInt(v, 10, 64)
				calls += n
			case "usec":
				u, _ := strconv.ParseFloat(v, 64)
				usec += u
			}
		}
	}
	return calls, usec
}
