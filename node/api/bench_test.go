package api

import (
	"strconv"
	"testing"
)

var (
	benchCheck = []byte(`{"rule":"per-key","key":"user-42","hits":1}`)
	benchBatch = func() []byte {
		var r ChecksRequest
		for i := range 100 {
			r.Checks = append(r.Checks, CheckRequest{Rule: "per-key", Key: "user-" + strconv.Itoa(i)})
		}
		return AppendChecksRequest(nil, &r)
	}()
	benchResult = CheckResult{Allowed: true, Rule: "per-key", Key: "user-42", Limit: 100, Remaining: 41, ResetMS: 600}
)

func BenchmarkDecodeCheck(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchCheck)))
	b.RunParallel(func(pb *testing.PB) {
		var req CheckRequest
		for pb.Next() {
			if err := DecodeCheck(benchCheck, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDecodeEncodeCheck is one single check's codec work on the
// server with reused destinations: decode the body, encode the answer.
func BenchmarkDecodeEncodeCheck(b *testing.B) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var req CheckRequest
		res := benchResult
		buf := make([]byte, 0, 256)
		for pb.Next() {
			if err := DecodeCheck(benchCheck, &req); err != nil {
				b.Fatal(err)
			}
			res.Rule, res.Key = req.Rule, req.Key
			buf = AppendCheckResult(buf[:0], &res)
		}
	})
}

func BenchmarkParseCheckQuery(b *testing.B) {
	q := []byte("rule=per-key&key=user-42&hits=1")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var req CheckRequest
		for pb.Next() {
			if err := ParseCheckQuery(q, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDecodeChecks100 decodes a batch of 100 distinct keys; each new
// key costs one string allocation (keys change between batches in real
// traffic; here the destination already holds them, so this is the floor).
func BenchmarkDecodeChecks100(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchBatch)))
	b.RunParallel(func(pb *testing.PB) {
		var req ChecksRequest
		for pb.Next() {
			if err := DecodeChecks(benchBatch, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDecodeChecks100Fresh decodes into a new destination each time:
// the cost with 100 keys never seen by that destination.
func BenchmarkDecodeChecks100Fresh(b *testing.B) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			var req ChecksRequest
			if err := DecodeChecks(benchBatch, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkAppendCheckResult(b *testing.B) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 0, 256)
		for pb.Next() {
			buf = AppendCheckResult(buf[:0], &benchResult)
		}
	})
}

func BenchmarkAppendResults100(b *testing.B) {
	rs := make([]CheckResult, 100)
	for i := range rs {
		rs[i] = benchResult
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 0, 16<<10)
		for pb.Next() {
			buf = AppendResults(buf[:0], rs)
		}
	})
}
