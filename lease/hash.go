package lease

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"unsafe"
)

// strHash is a seeded hash of strings for the indexes of a Prefix: the
// Go runtime's own hash of map keys where the CPU has no AES instructions
// (wyhash; runtime/hash64.go), keyed by four random words of its own, so
// that keys colliding in one process's tables cannot be chosen without
// them (an index keyed by clients' keys must not be floodable).
//
// It is not hash/maphash for its cost: a key of up to 16 bytes hashes in
// about 15 instructions inline (short), where maphash.String costs about
// 65 (its hashing is as fast, its calls into the runtime are not). No
// module offers a one-shot seeded string hash cheaper than maphash
// (cespare/xxhash's seeded form is its streaming Digest).
type strHash [4]uint64

// newStrHash returns a strHash with random words (odd, as the runtime's).
func newStrHash() strHash {
	var k strHash
	for i := range k {
		k[i] = rand.Uint64() | 1
	}
	return k
}

const wyM5 = 0x1d8e4e27c47d124f

// sum is the hash of s.
func (k *strHash) sum(s string) uint64 {
	n := len(s)
	if n == 0 {
		return k[0]
	}
	p := unsafe.Pointer(unsafe.StringData(s))
	if n <= 16 {
		a, b := shortWords(p, n)
		return k.short(a, b, n)
	}
	seed, l := k[0], n
	if l > 48 {
		seed1, seed2 := seed, seed
		for ; l > 48; l -= 48 {
			seed = mix(r8(p)^k[1], r8(unsafe.Add(p, 8))^seed)
			seed1 = mix(r8(unsafe.Add(p, 16))^k[2], r8(unsafe.Add(p, 24))^seed1)
			seed2 = mix(r8(unsafe.Add(p, 32))^k[3], r8(unsafe.Add(p, 40))^seed2)
			p = unsafe.Add(p, 48)
		}
		seed ^= seed1 ^ seed2
	}
	for ; l > 16; l -= 16 {
		seed = mix(r8(p)^k[1], r8(unsafe.Add(p, 8))^seed)
		p = unsafe.Add(p, 16)
	}
	return mix(wyM5^uint64(n), mix(r8(unsafe.Add(p, l-16))^k[1], r8(unsafe.Add(p, l-8))^seed))
}

// short is sum of a string of n bytes, 1 to 16, whose shortWords are a
// and b.
func (k *strHash) short(a, b uint64, n int) uint64 {
	return mix(wyM5^uint64(n), mix(a^k[1], b^k[0]))
}

// shortWords are the two words of the n bytes at p, 1 to 16, that hold
// all of them (overlapping), as wyhash reads them: two strings of the
// same length are equal if and only if their words are.
func shortWords(p unsafe.Pointer, n int) (a, b uint64) {
	switch {
	case n >= 8:
		return r8(p), r8(unsafe.Add(p, n-8))
	case n >= 4:
		return r4(p), r4(unsafe.Add(p, n-4))
	}
	return uint64(*(*byte)(p)) | uint64(*(*byte)(unsafe.Add(p, n>>1)))<<8 | uint64(*(*byte)(unsafe.Add(p, n-1)))<<16, 0
}

func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// r8 and r4 read 8 and 4 bytes at p, little-endian: one load each where
// the CPU allows it (the fixed length leaves no bounds check). The callers
// keep them within their strings.
func r8(p unsafe.Pointer) uint64 { return binary.LittleEndian.Uint64((*[8]byte)(p)[:]) }

func r4(p unsafe.Pointer) uint64 { return uint64(binary.LittleEndian.Uint32((*[4]byte)(p)[:])) }
