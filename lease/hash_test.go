package lease

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"
)

// strHash depends on every byte of a key and on its length, on short
// keys and on long ones (each of its branches): a key changed in any one
// byte, or one byte shorter, hashes elsewhere (for these keys, with these
// seeds: a 64-bit collision among them would be a bug, not bad luck).
func TestStrHashEveryByte(t *testing.T) {
	k := newStrHash()
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 0; n <= 200; n++ {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		key := string(b)
		h := k.sum(key)
		if n > 0 && k.sum(key[:n-1]) == h {
			t.Fatalf("len %d: the key one byte shorter has its hash", n)
		}
		for i := range n {
			c := []byte(key)
			c[i] ^= 1 << (i % 8)
			if k.sum(string(c)) == h {
				t.Fatalf("len %d: flipping byte %d does not change the hash", n, i)
			}
		}
	}
	other := newStrHash()
	same := 0
	for n := range 64 {
		if key := strings.Repeat("k", n); other.sum(key) == k.sum(key) {
			same++
		}
	}
	if same > 1 { // the empty key hashes to each seed's first word: odd, rarely equal
		t.Fatalf("two seeds hash %d of 64 keys alike", same)
	}
}

// shortWords hold all the bytes of a key of 1 to 16: two keys of one
// length are equal exactly when their words are (Prefix's load compares
// keys by their words alone). And short of them is sum.
func TestShortWords(t *testing.T) {
	k := newStrHash()
	rng := rand.New(rand.NewPCG(3, 4))
	words := func(s string) (uint64, uint64) { return shortWords(unsafe.Pointer(unsafe.StringData(s)), len(s)) }
	for n := 1; n <= 16; n++ {
		for range 50 {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			key := string(b)
			a, w := words(key)
			if got := k.short(a, w, n); got != k.sum(key) {
				t.Fatalf("len %d: short %x, sum %x", n, got, k.sum(key))
			}
			if a2, w2 := words(strings.Clone(key)); a2 != a || w2 != w {
				t.Fatalf("len %d: a copy has other words", n)
			}
			for i := range n {
				c := []byte(key)
				c[i]++
				if a2, w2 := words(string(c)); a2 == a && w2 == w {
					t.Fatalf("len %d: byte %d changed, the words did not", n, i)
				}
			}
		}
	}
}
