package lua

// Failover for real: a lease.Manager on a Store over a Redis Cluster with
// replicas and over Sentinel, under a bounded load, while a master is
// killed and its replica promoted. What must hold whatever the machine's
// load is asserted (every check answered, no 503 for local rules, at most
// one window over the limit, the Store back within a generous bound); the
// figures are logged as a row of the fault table of docs/faults.md.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/lua/redistest"
)

func slotOf(redisKey string) int { return int(keySlot(redisKey)) }

// keysOn returns n counter keys (prefix-i) whose token_bucket Redis keys
// are served by master, per owners (SlotMasters).
func keysOn(s *Store, owners []string, master, prefix string, n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprintf("%s-%d", prefix, i)
		if owners[slotOf(s.Key(k, lease.TokenBucket))] == master {
			keys = append(keys, k)
		}
	}
	return keys
}

// TestFailoverCluster kills a master of a Redis Cluster with replicas under
// load, twice: once left to the Cluster's automatic failover (short
// cluster-node-timeout), once forced at once with CLUSTER FAILOVER
// TAKEOVER on the replica. Every check of the load is on keys of the
// killed master.
func TestFailoverCluster(t *testing.T) {
	c := redistest.StartClusterWithReplicas(t, time.Second)
	s := newTestStore(t, c.Addrs()...)
	// The slot computation must be the Cluster's.
	if got, err := redistest.Command(c.Masters[0].Addr, "CLUSTER", "KEYSLOT", s.Key("x", lease.TokenBucket)); err != nil || got != fmt.Sprint(slotOf(s.Key("x", lease.TokenBucket))) {
		t.Fatalf("CLUSTER KEYSLOT = %q, %v; slotOf says %d", got, err, slotOf(s.Key("x", lease.TokenBucket)))
	}
	for _, tc := range []struct {
		name   string
		forced bool
	}{{"cluster-auto", false}, {"cluster-forced", true}} {
		t.Run(tc.name, func(t *testing.T) {
			owners, err := c.SlotMasters()
			if err != nil {
				t.Fatal(err)
			}
			// The victim: a master from the start that is still one.
			var victim *redistest.Server
			for _, m := range c.Masters {
				if m.Running() && strings.Contains(strings.Join(owners, " "), m.Addr) {
					victim = m
					break
				}
			}
			if victim == nil {
				t.Fatal("no original master left to kill")
			}
			replica := c.Replicas[indexOf(c.Masters, victim)]
			fresh := keysOn(s, owners, victim.Addr, "fresh-"+tc.name, 20000)
			lim := keysOn(s, owners, victim.Addr, "lim-"+tc.name, 1)[0]
			m := newManager(t, newTestStore(t, c.Addrs()...), lease.Config{})
			l := startFaultLoad(t, m, func(i int64) string { return fresh[int(i)%len(fresh)] }, lim)
			l.waitChecks(2 * faultPairs) // a second's worth of baseline

			l.Inject()
			victim.Kill()
			l.Heal() // recovery is measured from the kill: nothing else ends the fault
			if tc.forced {
				replica.Do("CLUSTER", "FAILOVER", "TAKEOVER")
			}
			// The event: the replica serves the slots, and the Cluster is ok.
			slot := slotOf(s.Key(lim, lease.TokenBucket))
			clocktest.Eventually(t, recoveryBound, "the replica to be promoted", func() bool {
				owners, err := c.SlotMasters()
				if err != nil || owners[slot] != replica.Addr {
					return false
				}
				info, err := redistest.Command(replica.Addr, "CLUSTER", "INFO")
				return err == nil && strings.Contains(info, "cluster_state:ok")
			})
			promoted := time.Duration(time.Now().UnixNano() - l.healAt.Load())
			recovery := l.WaitRecovered()
			t.Logf("replica promoted (seen) %s after the kill", ms(promoted))
			l.Row(tc.name, recovery).check(t)
		})
	}
}

func indexOf(ss []*redistest.Server, s *redistest.Server) int {
	for i, x := range ss {
		if x == s {
			return i
		}
	}
	return -1
}

// TestFailoverSentinel kills the master watched by a Sentinel under load;
// the Sentinel promotes the replica (down-after-milliseconds 500) and the
// Store follows it.
func TestFailoverSentinel(t *testing.T) {
	ss := redistest.StartSentinels(t, 500*time.Millisecond)
	newStore := func() *Store {
		s, err := NewStore(Config{Addrs: ss.Addrs, SentinelMaster: ss.Name})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	m := newManager(t, newStore(), lease.Config{})
	l := startFaultLoad(t, m, func(i int64) string { return fmt.Sprintf("fresh-%d", i) }, "lim")
	l.waitChecks(2 * faultPairs)

	l.Inject()
	ss.Master.Kill()
	l.Heal()
	clocktest.Eventually(t, recoveryBound, "the Sentinel to promote the replica", func() bool {
		addr, err := ss.MasterAddr()
		return err == nil && addr == ss.Replica.Addr
	})
	promoted := time.Duration(time.Now().UnixNano() - l.healAt.Load())
	recovery := l.WaitRecovered()
	t.Logf("replica promoted (seen) %s after the kill", ms(promoted))
	l.Row("sentinel", recovery).check(t)
}
