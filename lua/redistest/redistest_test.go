package redistest

import (
	"strings"
	"testing"
	"time"
)

// requireFlavor fails the test unless the server at addr is the one
// SLUICE_TEST_REDIS chose: a helper that started redis-server whatever
// the variable says would run every Valkey pass on Redis.
func requireFlavor(t *testing.T, addr string) {
	t.Helper()
	f, err := CurrentFlavor()
	if err != nil {
		t.Fatal(err)
	}
	v, err := Version(addr)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(v, f.Name+" ") {
		t.Fatalf("%s runs %s, want %s (%s=%q)", addr, v, f.Name, EnvServer, f.Name)
	}
	t.Logf("%s: %s", addr, v)
}

func TestCurrentFlavor(t *testing.T) {
	for _, c := range []struct{ env, server, cli string }{
		{"", "redis-server", "redis-cli"},
		{"redis", "redis-server", "redis-cli"},
		{"valkey", "valkey-server", "valkey-cli"},
	} {
		t.Setenv(EnvServer, c.env)
		f, err := CurrentFlavor()
		if err != nil || f.Server != c.server || f.CLI != c.cli {
			t.Errorf("%s=%q: %+v, %v; want %s and %s", EnvServer, c.env, f, err, c.server, c.cli)
		}
	}
	t.Setenv(EnvServer, "keydb")
	if f, err := CurrentFlavor(); err == nil || !strings.Contains(err.Error(), "want redis or valkey") {
		t.Errorf("%s=keydb: %+v, %v; want an error naming the choices", EnvServer, f, err)
	}
}

func TestStartKillRestart(t *testing.T) {
	s := StartServer(t)
	requireFlavor(t, s.Addr)
	if got := s.Do("SET", "k", "v"); got != "OK" {
		t.Fatalf("SET = %q, want OK", got)
	}
	if got := s.Do("CONFIG", "GET", "save"); got != "save\n" {
		t.Fatalf("CONFIG GET save = %q, want persistence off", got)
	}
	s.Kill()
	if _, err := Command(s.Addr, "PING"); err == nil {
		t.Fatal("PING answered after Kill")
	}
	s.Restart()
	if got := s.Do("EXISTS", "k"); got != "0" {
		t.Fatalf("EXISTS after restart = %q, want 0 (no persistence)", got)
	}
}

func TestCluster(t *testing.T) {
	addrs := StartCluster(t)
	if len(addrs) != 3 {
		t.Fatalf("got %d addresses, want 3", len(addrs))
	}
	for _, a := range addrs {
		requireFlavor(t, a)
	}
	info, err := Command(addrs[0], "CLUSTER", "INFO")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"cluster_state:ok", "cluster_size:3", "cluster_slots_assigned:16384"} {
		if !strings.Contains(info, want) {
			t.Errorf("CLUSTER INFO lacks %q:\n%s", want, info)
		}
	}
}

func TestStartWithClock(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)
	s, clock := StartWithClock(t, start)
	requireFlavor(t, s.Addr)
	if got, want := s.Do("TIME"), "1772366400\n123456"; got != want {
		t.Fatalf("TIME = %q, want %q (frozen at start, in µs)", got, want)
	}
	// Real time must pass to see that the server's clock does not move:
	// the server is a real process.
	time.Sleep(20 * time.Millisecond)
	if got, want := s.Do("TIME"), "1772366400\n123456"; got != want {
		t.Fatalf("TIME 20ms later = %q, want %q: the clock must stay frozen", got, want)
	}
	s.Do("SET", "k", "v", "PX", "1000")
	clock.Advance(999 * time.Millisecond)
	if got, want := s.Do("TIME"), "1772366401\n122456"; got != want {
		t.Fatalf("TIME after Advance(999ms) = %q, want %q", got, want)
	}
	if got := s.Do("EXISTS", "k"); got != "1" {
		t.Fatalf("a key with a 1000ms TTL is gone after 999ms of fake time")
	}
	clock.Advance(2 * time.Millisecond)
	if got := s.Do("EXISTS", "k"); got != "0" {
		t.Fatalf("a key with a 1000ms TTL is still there after 1001ms of fake time")
	}
	if got := clock.Now(); !got.Equal(start.Truncate(time.Microsecond).Add(1001 * time.Millisecond)) {
		t.Fatalf("Now = %v", got)
	}
}

func TestClockStaysFrozen(t *testing.T) {
	s, _ := StartWithClock(t, time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	for i := 0; i < 200; i++ {
		s.Do("SET", "k"+string(rune('a'+i%26))+string(rune('a'+i/26)), "v", "PX", "100000")
	}
	for i := 0; i < 12; i++ {
		time.Sleep(100 * time.Millisecond) // real time, for the real server's expiry cycle to run
		if got := s.Do("DBSIZE"); got != "200" {
			t.Fatalf("after %dms: DBSIZE = %s, want 200: keys expired on a frozen clock", (i+1)*100, got)
		}
	}
}

func TestSentinel(t *testing.T) {
	master := StartServer(t)
	sentinel := StartSentinel(t, "m", master.Addr)
	requireFlavor(t, sentinel)
	if got := master.Do("SET", "k", "v"); got != "OK" {
		t.Fatalf("SET = %q, want OK", got)
	}
}
