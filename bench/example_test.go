package bench_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/bench"
)

func ExampleSchedule() {
	// 4 requests per second for one second: due at 0, 250ms, 500ms, 750ms,
	// whatever the server does.
	s := bench.Schedule{Rate: 4, Duration: time.Second}
	for i := range s.Count() {
		fmt.Println(s.At(i))
	}
	// Output:
	// 0s
	// 250ms
	// 500ms
	// 750ms
}

func ExampleHistogram() {
	var h bench.Histogram
	for i := 1; i <= 100; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	fmt.Println(h.Quantile(0.5).Round(time.Microsecond), h.Quantile(0.99).Round(time.Microsecond), h.Max())
	// Output: 50µs 99µs 100µs
}

func ExampleScoreAccuracy() {
	// A rule of 10 per second, burst 10, over a 2s run allows 30 per key.
	l := bench.Limit{Limit: 10, Period: time.Second, Burst: 10}
	offered := []int64{100, 5}
	admitted := []int64{31, 5} // one hit too many on the first key
	a := bench.ScoreAccuracy(l, 2*time.Second, offered, admitted)
	fmt.Printf("bound %.0f, over-admitted %d on %d key(s), under-admission %.1f%%\n", a.Bound, a.OverAdmitted, a.OverKeys, a.UnderPct)
	// Output: bound 30, over-admitted 1 on 1 key(s), under-admission 0.0%
}
