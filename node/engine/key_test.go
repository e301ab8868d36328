package engine

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/node/api"
)

// TestKeyProblemAsAPI: the engine's key validation is the public API's
// rule (api.ValidKey) on keys of every kind of byte, at every offset of
// its eight-bytes-at-a-time loop.
func TestKeyProblemAsAPI(t *testing.T) {
	pieces := []string{"a", "Z", "0", "~", " ", "\x1f", "\x7f", "\x00", "\n", "\t", "é", "😀", "\xff", "\xc3", "\x80"}
	check := func(k string) {
		t.Helper()
		if got, want := KeyProblem(k) == "", api.ValidKey(k); got != want {
			t.Fatalf("key %q: KeyProblem %q, api.ValidKey %v", k, KeyProblem(k), want)
		}
	}
	check("")
	check(strings.Repeat("k", MaxKeyLen))
	check(strings.Repeat("k", MaxKeyLen+1))
	r := rand.New(rand.NewPCG(1, 2))
	for range 50000 {
		var sb strings.Builder
		for range r.IntN(40) {
			if r.IntN(8) == 0 {
				sb.WriteString(pieces[r.IntN(len(pieces))])
			} else {
				sb.WriteByte(byte(' ' + r.IntN(95))) // printable ASCII
			}
		}
		check(sb.String())
	}
}

// BenchmarkKeyProblem is the one key validation of a short and a long
// printable key.
func BenchmarkKeyProblem(b *testing.B) {
	for _, k := range []string{"user-42", "tenant-0123456789abcdef/user-0123456789"} {
		b.Run(strconv.Itoa(len(k)), func(b *testing.B) {
			for range b.N {
				if KeyProblem(k) != "" {
					b.Fatal(k)
				}
			}
		})
	}
}
