package lua

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/rueidis"
)

// The rule store: the admin API's rules (node's RuleStore) kept in Redis,
// one hash of rules plus a version key and a signature key, all under one
// hash tag so that a Redis Cluster keeps them in one slot and one script
// can write them:
//
//	{sl:rules}:set      hash: rule name → {"pos":0,"rule":{...}}
//	{sl:rules}:version  integer, set by every save (the writer's next version)
//	{sl:rules}:sig      the writer's signature of the set (opaque here:
//	                    the node signs with a key Redis does not hold)
//
// A rule is stored as the JSON the node gives (its spec) wrapped with its
// position, because a hash has no order and a rule set does. The scripts
// rules_save.lua and rules_load.lua write and read the keys atomically;
// RulesVersion is a plain GET (the nodes poll it).

var (
	//go:embed rules_save.lua
	rulesSaveSrc string
	//go:embed rules_load.lua
	rulesLoadSrc string

	// Immutable once built (a script's source and SHA-1).
	rulesSave = rueidis.NewLuaScript(rulesSaveSrc)
	rulesLoad = rueidis.NewLuaScript(rulesLoadSrc)
)

// RulesKeys returns the Redis keys of the rule set: the hash, the version
// key and the signature key.
func (s *Store) RulesKeys() (set, version, sig string) {
	tag := "{" + s.prefix + ":rules}:"
	return tag + "set", tag + "version", tag + "sig"
}

// storedRule is a rule's value in the hash.
type storedRule struct {
	Pos  int             `json:"pos"`
	Rule json.RawMessage `json:"rule"`
}

// SaveRules replaces the stored rule set with specs (the rules' JSON, in
// order; names[i] is the name of specs[i]) and its signature sig (nil for
// none) as version next (not 0) if the stored version is expect, and
// returns next and true. When the stored version is not expect it writes
// nothing and returns the stored version and false. An error means Redis did not
// answer (it wraps lease.ErrStoreUnavailable); the save may or may not
// have happened.
func (s *Store) SaveRules(ctx context.Context, expect, next uint64, names []string, specs [][]byte, sig []byte) (uint64, bool, error) {
	if len(names) != len(specs) {
		return 0, false, fmt.Errorf("cannot save rules: %d names for %d rules", len(names), len(specs))
	}
	if next == 0 {
		return 0, false, errors.New("cannot save rules: version 0")
	}
	args := make([]string, 0, 3+2*len(names))
	args = append(args, strconv.FormatUint(expect, 10), strconv.FormatUint(next, 10), string(sig))
	for i, name := range names {
		v, err := json.Marshal(storedRule{Pos: i, Rule: specs[i]})
		if err != nil {
			return 0, false, fmt.Errorf("cannot save rules: rule %q: %w", name, err)
		}
		args = append(args, name, string(v))
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	set, ver, sk := s.RulesKeys()
	r, err := rulesSave.Exec(ctx, s.client, []string{set, ver, sk}, args).AsStrSlice()
	if err != nil {
		return 0, false, unavailable("rules_save", err)
	}
	if len(r) != 2 || (r[0] != "0" && r[0] != "1") {
		return 0, false, fmt.Errorf("cannot save rules: unexpected answer %q", r)
	}
	v, err := strconv.ParseUint(r[1], 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("cannot save rules: stored version %q: %w", r[1], err)
	}
	return v, r[0] == "1", nil
}

// LoadRules returns the stored version, rules (each rule's JSON, in the
// order they were saved) and signature (nil when none). Version 0 with no
// rules means never saved.
func (s *Store) LoadRules(ctx context.Context) (version uint64, specs [][]byte, sig []byte, err error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	set, ver, sk := s.RulesKeys()
	vals, err := rulesLoad.Exec(ctx, s.client, []string{set, ver, sk}, nil).ToArray()
	if err != nil {
		return 0, nil, nil, unavailable("rules_load", err)
	}
	if len(vals) != 3 {
		return 0, nil, nil, fmt.Errorf("cannot load rules: script returned %d values, want 3", len(vals))
	}
	ss, err := vals[2].ToString()
	if err != nil {
		return 0, nil, nil, fmt.Errorf("cannot load rules: signature: %w", err)
	}
	if ss != "" {
		sig = []byte(ss)
	}
	vs, err := vals[0].ToString()
	if err != nil {
		return 0, nil, nil, fmt.Errorf("cannot load rules: version: %w", err)
	}
	version, err = strconv.ParseUint(vs, 10, 64)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("cannot load rules: version %q: %w", vs, err)
	}
	kv, err := vals[1].AsStrSlice()
	if err != nil {
		return 0, nil, nil, fmt.Errorf("cannot load rules: %w", err)
	}
	stored := make([]storedRule, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		var r storedRule
		if err := json.Unmarshal([]byte(kv[i+1]), &r); err != nil {
			return 0, nil, nil, fmt.Errorf("cannot load rules: rule %q: %w", kv[i], err)
		}
		stored = append(stored, r)
	}
	slices.SortStableFunc(stored, func(a, b storedRule) int { return cmp.Compare(a.Pos, b.Pos) })
	specs = make([][]byte, len(stored))
	for i := range stored {
		specs[i] = stored[i].Rule
	}
	return version, specs, sig, nil
}

// RulesVersion returns the stored rule set's version (0: never saved).
func (s *Store) RulesVersion(ctx context.Context) (uint64, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	_, ver, _ := s.RulesKeys()
	v, err := s.client.Do(ctx, s.client.B().Get().Key(ver).Build()).AsUint64()
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	if err != nil {
		return 0, unavailable("rules_version", err)
	}
	return v, nil
}
