package clocktest_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease/clocktest"
)

func TestEventuallyReturnsOnceCondHolds(t *testing.T) {
	var calls atomic.Int32
	clocktest.Eventually(t, time.Minute, "the third call", func() bool { return calls.Add(1) == 3 })
	if n := calls.Load(); n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
}

// recorder is a testing.TB that records a Fatalf instead of ending the
// test, so the failure message can be checked.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Fatalf(format string, args ...any) { r.msg += fmt.Sprintf(format, args...) }

func TestEventuallyNamesWhatItWaitedFor(t *testing.T) {
	r := &recorder{TB: t}
	clocktest.EventuallyState(r, 5*time.Millisecond, "the moon", func() (bool, string) { return false, "still new" })
	if !strings.Contains(r.msg, "the moon") || !strings.Contains(r.msg, "still new") {
		t.Fatalf("failure message %q does not name what was waited for and the last state", r.msg)
	}
}
