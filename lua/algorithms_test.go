package lua

import (
	"testing"

	"github.com/sluicehq/sluice/lease"
)

// TestAlgorithmTable checks that every algorithm of lease's table has a
// row here with a unique key suffix and the scripts its kind needs (and
// for a leased one its packer), and that every file the rows name is
// embedded (newScripts panics otherwise).
func TestAlgorithmTable(t *testing.T) {
	s := newScripts()
	seen := map[string]bool{}
	for _, a := range lease.Algorithms() {
		if int(a) >= len(algorithms) {
			t.Errorf("%v has no row", a)
			continue
		}
		row, sc := algorithms[a], s[a]
		if row.suffix == "" || seen[row.suffix] {
			t.Errorf("%v: key suffix %q empty or repeated", a, row.suffix)
		}
		seen[row.suffix] = true
		switch {
		case a.Leased():
			if sc.lease == nil || sc.ret == nil || row.pack == nil {
				t.Errorf("%v is leased: it needs a lease and a return script, and how they pack its state", a)
			}
		case a.Acquired():
			if sc.acquire == nil || sc.release == nil {
				t.Errorf("%v has slots: it needs an acquire and a release script", a)
			}
		default:
			if sc.log == nil {
				t.Errorf("%v is checked by Store.Log: it needs a log script", a)
			}
		}
	}
}
