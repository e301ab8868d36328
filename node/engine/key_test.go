package engine

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/node/api"
)

// TestKeyProblemAsAPI: the engine's key validation is the public API's
// rule (api.ValidKey) on keys of every kind of byte, at every offset of
// its eight-bytes-at-a-time loop.
func TestKeyProblemAsAPI(t *testing.T) {
	pieces := []string{"a", "Z", "0", "~", " ", "\x1f", "\x7f", "\x00", "\n", "\t", "é", "😀", "\xff", "\xc3", "\x80",
		"\u0080", "\u0085", "\u009f", "\u00a0", "\xc2", "\u2028"}
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

// validKey is the rule for keys docs/api.md states, written with the
// standard library alone: 1 to 256 bytes of UTF-8 without control
// characters (unicode.IsControl: C0, DEL and C1, U+0080 to U+009F).
func validKey(k string) bool {
	return len(k) >= 1 && len(k) <= MaxKeyLen && utf8.ValidString(k) && !strings.ContainsFunc(k, unicode.IsControl)
}

// TestKeyProblemControls: every control character is refused, C1 (U+0080
// to U+009F, two bytes in UTF-8) as C0 and DEL are, by the engine and by
// node/api alike; the characters around them are not.
func TestKeyProblemControls(t *testing.T) {
	for _, c := range []struct {
		key  string
		want string
	}{
		{"a\u0080b", "must not hold control characters"},
		{"a\u0085", "must not hold control characters"}, // NEL
		{"\u009fb", "must not hold control characters"},
		{"0123456789\u0090", "must not hold control characters"}, // past the first eight bytes
		{"a\x00b", "must not hold control characters"},
		{"a\x7fb", "must not hold control characters"},
		{"a\u00a0b", ""}, // NO-BREAK SPACE: not a control
		{"a\u007eb", ""},
		{"\u00ff", ""},
	} {
		if got := KeyProblem(c.key); got != c.want {
			t.Errorf("KeyProblem(%q) = %q, want %q", c.key, got, c.want)
		}
		if got := TextProblem(c.key); got != c.want {
			t.Errorf("TextProblem(%q) = %q, want %q", c.key, got, c.want)
		}
		if api.ValidKey(c.key) != (c.want == "") || (api.GivenKeyMsg(c.key) == "") != (c.want == "") {
			t.Errorf("node/api on %q: ValidKey %v, GivenKeyMsg %q; want valid %v", c.key, api.ValidKey(c.key), api.GivenKeyMsg(c.key), c.want == "")
		}
	}
}

// FuzzKeyProblem: the engine's key validation, node/api's and the rule as
// docs/api.md states it (validKey) agree on every key.
func FuzzKeyProblem(f *testing.F) {
	for _, s := range []string{"user-42", "a\u0085b", "\u00a0", "\xc2", "\xc2\x9f", "01234567\u0080", "é😀", strings.Repeat("k", MaxKeyLen+1)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, k string) {
		want := validKey(k)
		if got := KeyProblem(k) == ""; got != want {
			t.Fatalf("KeyProblem(%q) = %q, want valid %v", k, KeyProblem(k), want)
		}
		if got := api.ValidKey(k); got != want {
			t.Fatalf("api.ValidKey(%q) = %v, want %v", k, got, want)
		}
	})
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
