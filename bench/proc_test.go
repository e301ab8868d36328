package bench

import (
	"errors"
	"math"
	"os"
	"strings"
	"testing"
)

func TestParseProcStat(t *testing.T) {
	tests := []struct {
		name string
		line string
		want float64
		err  bool
	}{
		{"plain", "1234 (sluiced) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 100 0 0", 3, false},
		{"name with spaces and parens", "77 (a b) (c)) R 1 1 1 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 1 0 0", 0.1, false},
		{"short", "1 (x) S 1 2 3", 0, true},
		{"no name", "1 x S", 0, true},
		{"bad number", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 abc 3 0", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseProcStat([]byte(tt.line))
		if (err != nil) != tt.err || (err != nil && !errors.Is(err, ErrProcStat)) {
			t.Errorf("%s: err = %v, want error %v", tt.name, err, tt.err)
			continue
		}
		if math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
	if _, err := ProcCPU(os.Getpid()); err != nil {
		t.Errorf("own /proc stat: %v", err)
	}
}

func FuzzParseProcStat(f *testing.F) {
	f.Add([]byte("1234 (sluiced) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 100 0 0"))
	f.Add([]byte("1 ()) R"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ParseProcStat(b)
		if err == nil && (v < 0 || math.IsNaN(v)) {
			t.Fatalf("accepted %q as %v", b, v)
		}
	})
}

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_evalsha:calls=120,usec=800,usec_per_call=6.67,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=3,usec=10\r\ncmdstat_client|setname:calls=2,usec=1\r\n\r\n"
	got, err := ParseCommandStats([]byte(info))
	if err != nil {
		t.Fatal(err)
	}
	if got["evalsha"] != 120 || got["info"] != 3 || got["client|setname"] != 2 || len(got) != 3 {
		t.Fatalf("got %v", got)
	}
	for _, bad := range []string{"cmdstat_x:usec=1", "cmdstat_x:calls=-1", "cmdstat_:calls=1", "cmdstat_x:calls=abc"} {
		if _, err := ParseCommandStats([]byte(bad)); !errors.Is(err, ErrRedisReply) {
			t.Errorf("%q: err = %v", bad, err)
		}
	}
	diff, total := DiffCommandStats(map[string]int64{"evalsha": 100, "info": 1}, map[string]int64{"evalsha": 130, "eval": 2, "info": 9, "ping": 4})
	if total != 32 || diff["evalsha"] != 30 || diff["eval"] != 2 || len(diff) != 2 {
		t.Fatalf("diff %v total %d", diff, total)
	}
}

func FuzzParseCommandStats(f *testing.F) {
	f.Add([]byte("# Commandstats\r\ncmdstat_evalsha:calls=120,usec=800\r\n"))
	f.Add([]byte("cmdstat_a:calls=1,calls=2\ncmdstat_b:"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseCommandStats(b)
		if err != nil {
			return
		}
		for k, v := range m {
			if v < 0 || strings.ContainsAny(k, "\n") {
				t.Fatalf("bad entry %q=%d", k, v)
			}
		}
	})
}

func TestParseMachineStat(t *testing.T) {
	got, err := ParseMachineStat([]byte("cpu  100 5 50 9000 20 3 2 40 0 0\ncpu0 50 2 25 4500 10 1 1 20 0 0\n"))
	if err != nil || math.Abs(got-1.95) > 1e-9 { // (100+5+50+40)/100
		t.Fatalf("got %v, %v; want 1.95", got, err)
	}
	for _, bad := range []string{"", "cpu 1 2 3", "cpu0 1 2 3 4 5 6 7 8", "cpu 1 2 x 4 5 6 7 8"} {
		if _, err := ParseMachineStat([]byte(bad)); !errors.Is(err, ErrProcStat) {
			t.Errorf("%q: err %v", bad, err)
		}
	}
	if _, err := MachineCPU(); err != nil {
		t.Error(err)
	}
}

func FuzzParseMachineStat(f *testing.F) {
	f.Add([]byte("cpu  100 5 50 9000 20 3 2 40 0 0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if v, err := ParseMachineStat(b); err == nil && v < 0 {
			t.Fatalf("negative %v", v)
		}
	})
}

func TestScriptCalls(t *testing.T) {
	diff := map[string]int64{"evalsha": 10, "eval": 2, "fcall": 1, "hmget": 10, "time": 12}
	if got := ScriptCalls(diff); got != 13 {
		t.Fatalf("ScriptCalls = %d, want 13", got)
	}
}
