package node

import (
	"bytes"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strconv"
)

// Signed rule sets. Anyone who can write to Redis could otherwise install
// rules on every node (write the set, bump the version). With a cluster
// key (RulesConfig.ClusterKey) the node signs every set it saves to a
// shared store, and installs a stored set only when its signature holds:
//
//	sig = "v1." <version> "." hex(HMAC-SHA256(rules key, "sluice-rules-v1" |
//	      version (8 bytes, big endian) | count | count × spec))
//
// where each spec is length-prefixed (a uvarint) and the rules key is
// HKDF-SHA256(cluster key, info "sluice rule-set signing v1"): a key
// Redis never holds, apart from the key that signs internal requests. The
// version is inside the MAC, so a signed set cannot be stored again under
// another version; see loadStoreLocked for the versions a node refuses
// (older than one it installed: a rollback).

// rulesKeyInfo separates the rules key from every other use of the
// cluster key.
const rulesKeyInfo = "sluice rule-set signing v1"

// rulesMACContext starts every rule-set MAC.
const rulesMACContext = "sluice-rules-v1"

// rulesSigner signs and verifies stored rule sets; nil when the node has
// no cluster key (sets are then neither signed nor verified).
type rulesSigner struct{ key []byte }

func newRulesSigner(clusterKey []byte) *rulesSigner {
	if len(clusterKey) == 0 {
		return nil
	}
	k, err := hkdf.Key(sha256.New, clusterKey, nil, rulesKeyInfo, sha256.Size)
	if err != nil { // only for a key length HKDF cannot give
		panic("node: cannot derive the rules key: " + err.Error())
	}
	return &rulesSigner{key: k}
}

// mac is the MAC of version and specs.
func (s *rulesSigner) mac(version uint64, specs [][]byte) []byte {
	m := hmac.New(sha256.New, s.key)
	var buf []byte
	buf = binary.AppendUvarint(buf, uint64(len(rulesMACContext)))
	buf = append(buf, rulesMACContext...)
	buf = binary.BigEndian.AppendUint64(buf, version)
	buf = binary.AppendUvarint(buf, uint64(len(specs)))
	m.Write(buf)
	for _, b := range specs {
		m.Write(binary.AppendUvarint(buf[:0], uint64(len(b))))
		m.Write(b)
	}
	return m.Sum(nil)
}

// sign returns the stored signature of version and specs.
func (s *rulesSigner) sign(version uint64, specs [][]byte) []byte {
	out := []byte("v1.")
	out = strconv.AppendUint(out, version, 10)
	out = append(out, '.')
	return hex.AppendEncode(out, s.mac(version, specs))
}

// Why a stored set is refused; each is counted in
// sluice_rules_store_refused_total{reason}.
var (
	// errRulesUnsigned: the set has no signature for its version (written
	// by a node without the cluster key or of the previous release, or by
	// hand in Redis).
	errRulesUnsigned = errors.New("not signed with the cluster key (written by a node without it or of an older release, or edited in the store)")
	// errRulesBadSignature: a signature that does not hold.
	errRulesBadSignature = errors.New("its signature does not hold (another cluster key, or the set was edited in the store)")
)

// verify checks sig against version and specs: nil, errRulesUnsigned
// (no signature, or one for another version: the version was moved
// without signing) or errRulesBadSignature.
func (s *rulesSigner) verify(version uint64, specs [][]byte, sig []byte) error {
	rest, ok := bytes.CutPrefix(sig, []byte("v1."))
	if !ok {
		if len(sig) == 0 {
			return errRulesUnsigned
		}
		return errRulesBadSignature
	}
	vs, hexMAC, ok := bytes.Cut(rest, []byte{'.'})
	if !ok {
		return errRulesBadSignature
	}
	sv, err := strconv.ParseUint(string(vs), 10, 64)
	if err != nil {
		return errRulesBadSignature
	}
	if sv != version {
		return errRulesUnsigned
	}
	got := make([]byte, hex.DecodedLen(len(hexMAC)))
	if _, err := hex.Decode(got, hexMAC); err != nil {
		return errRulesBadSignature
	}
	if !hmac.Equal(got, s.mac(version, specs)) {
		return errRulesBadSignature
	}
	return nil
}
