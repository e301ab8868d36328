package bench

import (
	"fmt"
	"testing"
	"time"
)

// The generator's own costs: a run must spend its CPU in the limiter, not
// here. Run with: go test -run XXX -bench . -benchtime 100000x ./bench/

func BenchmarkSessionDo(b *testing.B) {
	for _, kind := range []HTTPKind{Single, Pipelined, Batch, ForwardAuth} {
		b.Run(kind.String(), func(b *testing.B) {
			batch := 1
			if kind == Batch {
				batch = 100
			}
			addr := serve(b, CeilingHandler(SyntheticCanned(batch)))
			kc := KeyConfig{Keys: 10_000, Dist: Zipf}
			d, err := NewHTTPDriver(HTTPConfig{Kind: kind, Addr: addr, Conns: 8, Keys: kc.KeyNames()})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			ks, _ := NewKeySampler(kc)
			seq := ks.Sequence(1 << 16)
			b.ReportAllocs()
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				s, _ := d.NewSession()
				keys := make([]int32, batch)
				out := make([]Outcome, batch)
				i := 0
				for pb.Next() {
					for j := range keys {
						keys[j] = seq[i&(len(seq)-1)]
						i++
					}
					if err := s.Do(keys, out); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(batch)*float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}

func BenchmarkAppendBatch100(b *testing.B) {
	keys := KeyConfig{Keys: 100}.KeyNames()
	buf := make([]byte, 0, 8<<10)
	b.ReportAllocs()
	for b.Loop() {
		buf = append(buf[:0], `{"checks":[`...)
		for i, k := range keys {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = appendCheck(buf, "bench", k, []byte("1"))
		}
		buf = append(buf, "]}"...)
	}
}

func BenchmarkScanResults100(b *testing.B) {
	body := []byte(SyntheticCanned(100)["/v1/checks"].Body)
	out := make([]Outcome, 100)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	b.RunParallel(func(pb *testing.PB) {
		o := make([]Outcome, 100)
		for pb.Next() {
			if n, err := ScanResults(body, o); err != nil || n != 100 {
				b.Error(n, err)
				return
			}
		}
	})
	_ = out
}

func BenchmarkZipfNext(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			ks, _ := NewKeySampler(KeyConfig{Keys: n, Dist: Zipf})
			b.ReportAllocs()
			for b.Loop() {
				ks.Next()
			}
		})
	}
}

func BenchmarkTallyAdd(b *testing.B) {
	ks, _ := NewKeySampler(KeyConfig{Keys: 10_000, Dist: Zipf})
	seq := ks.Sequence(1 << 16)
	t := NewTally(10_000, time.Minute, 100*time.Millisecond)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		l := t.Local()
		defer l.Flush()
		i := 0
		for pb.Next() {
			l.Add(seq[i&(len(seq)-1)], 1, i&1 == 0, time.Duration(i))
			i++
		}
	})
}
