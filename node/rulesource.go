package node

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/node/engine"
	"github.com/sluicehq/sluice/node/rules"
)

// Rules at runtime (docs/rules.md). Exactly one source is
// authoritative for a node's rules, and GET /v1/rules says which:
//
//   - "file": the rule file given to sluiced -rules. The node installs it
//     with SetRules (cmd/sluiced reloads it); the admin API is read-only
//     and a write answers 409 naming the file. Each new set the node
//     installs gets the next local version (nodes reading the same file
//     may number it differently).
//   - "store": a [RuleStore] shared by the cluster (Redis: lua.Store).
//     Writes through the admin API are validated whole, then saved with
//     the version they replace (optimistic concurrency: the store refuses
//     a save whose expected version is stale), then installed here and
//     announced to the other members by a gossip broadcast; every node
//     also polls the store's version every RulesConfig.Poll, so that a
//     node that missed the broadcast converges at its next poll.
//   - "data_dir": a [DirStore], a file written atomically in a local
//     directory: the same as store for one node.
//   - "memory": none of these (a Node used alone, or sluiced without
//     -rules, -redis and -data-dir): writes are kept in this process only
//     and lost at restart.
//
// A node with a store installs the stored set before it reports ready
// (StartRules loads it; until a load succeeds /readyz answers 503). A
// stored set that no longer validates (written by hand, or by a newer
// version of Sluice) is refused like a bad rule file: the node keeps its
// last good set and shows the error in /readyz. A store whose version
// falls back to 0 (Redis lost its data) is not installed: the node keeps
// its rules, logs a warning, and the next write stores them again.
//
// With RulesConfig.ClusterKey, sets in the store are signed (rulesign.go)
// and a stored set is refused the same way, logged once per version and
// counted in sluice_rules_store_refused_total{reason}, when it is not
// signed ("unsigned": unless RulesConfig.AcceptUnsigned), badly signed
// ("bad_signature"), or older than a version this node installed or
// wrote ("rollback": a signed set of the past stored again). A write
// through the admin API replaces a refused set; so does one that changes
// no rule, unless the store holds the node's set, signed (storedLocked).
//
// Versions only grow: a save stores the greater of the version it
// replaces and the highest this node has seen, plus one, so that a store
// that lost its data does not give a version (an ETag) a second meaning.
//
// Installing a set goes through SetRules, which keeps the counters of
// every key whose rule and policy did not change.

// RuleStore keeps the rule set written through the admin API, with a
// version that every save raises (to the version the writer gives) and
// the writer's signature. It is declared here, where it is used;
// lua.Store (Redis) and DirStore implement it. Rules travel as their JSON
// specs (a rules.Spec each), in order.
type RuleStore interface {
	// LoadRules returns the stored version, rules and signature (nil when
	// none); version 0 with no rules means nothing was ever saved.
	LoadRules(ctx context.Context) (version uint64, specs [][]byte, sig []byte, err error)
	// RulesVersion returns the stored version (cheap: nodes poll it).
	RulesVersion(ctx context.Context) (uint64, error)
	// SaveRules replaces the stored set and its signature sig (opaque to
	// the store; nil for none) as version next (not 0) if the stored
	// version is expect, returning next and true; otherwise it writes
	// nothing and returns the stored version and false.
	SaveRules(ctx context.Context, expect, next uint64, names []string, specs [][]byte, sig []byte) (version uint64, saved bool, err error)
}

// Rule sources as GET /v1/rules names them.
const (
	SourceFile    = "file"
	SourceStore   = "store"
	SourceDataDir = "data_dir"
	SourceMemory  = "memory"
)

// RulesConfig says where a Node's rules come from. The zero value means
// "memory".
type RulesConfig struct {
	// File is the rule file when the rules come from one (sluiced -rules):
	// the admin API is then read-only. Empty means no file.
	File string
	// Store keeps the rules written through the admin API. Nil means no
	// store. File and Store are exclusive.
	Store RuleStore
	// Source names Store in GET /v1/rules: SourceStore (shared by the
	// cluster) or SourceDataDir (this node's own). Empty means SourceStore.
	Source string
	// Poll is how often the store's version is read, to catch a change
	// whose broadcast this node missed. Zero means DefaultRulesPoll.
	Poll time.Duration
	// LoadTimeout bounds one read or write of the store. Zero means 5s.
	LoadTimeout time.Duration
	// ClusterKey, when not empty, signs the sets this node saves to Store
	// and must sign the sets it installs from it (with a key derived
	// from it: see rulesign.go). Empty trusts the store: whoever can
	// write to it can install rules.
	ClusterKey []byte
	// AcceptUnsigned installs a stored set without a signature (logging a
	// warning once per version) instead of refusing it: for the upgrade
	// from a release that did not sign, until a write through an upgraded
	// node signs the set. A badly signed set is refused all the same.
	AcceptUnsigned bool
}

// DefaultRulesPoll is RulesConfig.Poll's default (and sluiced's
// -rules-poll, which also paces its rule file's checks): a change whose
// broadcast a node missed, or an edited rule file, is installed within a
// second, for a version read (or a stat) a second.
const DefaultRulesPoll = time.Second

// ruleAdmin is a Node's rule source and version.
type ruleAdmin struct {
	// mu serializes writes and installs, and protects the fields below.
	mu      sync.Mutex
	cfg     RulesConfig
	source  string
	version uint64
	// seen is the set this version numbers (seenAny: one was seen): a set
	// installed by SetRules directly (a rule file reload) gets the next
	// version when the admin API next looks (see currentLocked). A table
	// rebuilt around the same set (SetRLSRules) is not a new version.
	seen    *rules.Set
	seenAny bool
	// high is the highest store version this node installed or saved:
	// with a signer, a lower one is refused (a rollback). seenMax is the
	// highest it saw in the store, refused ones included: a save stores a
	// version above it, so that no node that refused a version number
	// takes the saved set for the refused one.
	high, seenMax uint64
	// signer signs and verifies the store's sets; nil without a cluster
	// key.
	signer *rulesSigner
	// unsigned: the installed stored set had no signature (accepted by
	// AcceptUnsigned); the next write saves even without a change, to
	// sign it.
	unsigned bool
	// loaded: the store's set was installed at least once.
	loaded bool
	// warnedEmpty: the store's version 0 while ours is not was logged.
	warnedEmpty bool
	// bad is a stored version that failed to validate (0: none): it is
	// not loaded again at every poll, only when the version moves on.
	bad uint64
	// lastErr is the last load error reported, so that a store that
	// stays unreachable is reported once, not at every poll.
	lastErr string

	kick chan struct{} // wakes the poll loop (a broadcast arrived)
	stop chan struct{} // closed by CloseRules
	done chan struct{} // closed when the poll loop returned
	once sync.Once
}

// StartRules sets where the node's rules come from. With a Store it
// loads the stored set (the node is not ready until a load succeeds; a
// failed first load is retried at every poll) and starts polling the
// store's version until CloseRules. Call it once, before Serve.
func (n *Node) StartRules(cfg RulesConfig) error {
	ra := &n.ra
	if cfg.File != "" && cfg.Store != nil {
		return errors.New("cannot take rules from a file and a store at once")
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultRulesPoll
	}
	if cfg.LoadTimeout <= 0 {
		cfg.LoadTimeout = 5 * time.Second
	}
	ra.mu.Lock()
	ra.cfg = cfg
	if cfg.Store != nil {
		ra.signer = newRulesSigner(cfg.ClusterKey)
	}
	switch {
	case cfg.File != "":
		ra.source = SourceFile
	case cfg.Store != nil && cfg.Source != "":
		ra.source = cfg.Source
	case cfg.Store != nil:
		ra.source = SourceStore
	default:
		ra.source = SourceMemory
	}
	ra.mu.Unlock()
	if cfg.Store == nil {
		return nil
	}
	ra.kick = make(chan struct{}, 1)
	ra.stop = make(chan struct{})
	ra.done = make(chan struct{})
	if err := n.loadStore(); err != nil {
		n.SetRulesError(err)
	}
	go n.pollRules()
	return nil
}

// CloseRules stops polling the rule store. It is idempotent.
func (n *Node) CloseRules() {
	ra := &n.ra
	if ra.stop == nil {
		return
	}
	ra.once.Do(func() { close(ra.stop) })
	<-ra.done
}

// RulesVersion returns the version of the installed rule set and its
// source (see StartRules).
func (n *Node) RulesVersion() (uint64, string) {
	ra := &n.ra
	ra.mu.Lock()
	defer ra.mu.Unlock()
	_, v := n.currentLocked()
	return v, ra.sourceLocked()
}

func (ra *ruleAdmin) sourceLocked() string {
	if ra.source == "" {
		return SourceMemory
	}
	return ra.source
}

// currentLocked returns the installed table and its version. A table
// installed behind the admin API's back (SetRules from a file reload)
// gets the next version.
func (n *Node) currentLocked() (*engine.Table, uint64) {
	ra := &n.ra
	t := n.eng.Table()
	if t != nil && (!ra.seenAny || t.Set() != ra.seen) {
		ra.seen, ra.seenAny = t.Set(), true
		ra.version++
	}
	return t, ra.version
}

// installLocked installs set as version.
func (n *Node) installLocked(set *rules.Set, version uint64) {
	n.SetRules(set)
	ra := &n.ra
	ra.seen, ra.seenAny = set, true
	ra.version = version
	ra.high = max(ra.high, version)
}

// nextVersionLocked is the version a save that replaces expect stores:
// above both expect (unless it is out of range) and every version this
// node has seen.
func (n *Node) nextVersionLocked(expect uint64) uint64 {
	ra := &n.ra
	m := max(ra.high, ra.seenMax, ra.version)
	if expect <= maxRulesVersion {
		m = max(m, expect)
	}
	return m + 1
}

// pollRules reads the store's version every Poll, or at once when a
// broadcast announces a version this node does not have, and installs a
// newer set.
func (n *Node) pollRules() {
	ra := &n.ra
	defer close(ra.done)
	t := time.NewTicker(ra.cfg.Poll)
	defer t.Stop()
	for {
		// A broadcast loads the stored set even when its version is one
		// this node refused: a member announces only sets it saved, and
		// a refused version's number may have been taken again since.
		kicked := false
		select {
		case <-ra.stop:
			return
		case <-t.C:
		case <-ra.kick:
			kicked = true
		}
		ctx, cancel := context.WithTimeout(context.Background(), ra.cfg.LoadTimeout)
		v, err := ra.cfg.Store.RulesVersion(ctx)
		cancel()
		if err != nil {
			n.log.Debug("cannot read the rule store's version", "err", err)
			continue
		}
		ra.mu.Lock()
		stale := (!ra.loaded || v != ra.version) && (v != ra.bad || v == 0 || kicked)
		ra.mu.Unlock()
		if stale {
			if err := n.loadStore(); err != nil {
				n.SetRulesError(err)
			}
		}
	}
}

// loadStore installs the store's set if its version differs from ours.
// It returns an error only when it differs from the last one returned.
func (n *Node) loadStore() error {
	ra := &n.ra
	ra.mu.Lock()
	defer ra.mu.Unlock()
	_, err := n.loadStoreLocked()
	if err == nil {
		ra.lastErr = ""
		return nil
	}
	if err.Error() == ra.lastErr {
		return nil
	}
	ra.lastErr = err.Error()
	return err
}

// loadStoreLocked reads the store and installs its set when its version
// is not ours; it returns the stored version.
func (n *Node) loadStoreLocked() (uint64, error) {
	ra := &n.ra
	ctx, cancel := context.WithTimeout(context.Background(), ra.cfg.LoadTimeout)
	defer cancel()
	v, specs, sig, err := ra.cfg.Store.LoadRules(ctx)
	if err != nil {
		return 0, fmt.Errorf("cannot load rules from the %s: %w", ra.source, err)
	}
	if v > maxRulesVersion {
		return v, n.refuseStoredLocked(v, errRulesVersionRange)
	}
	ra.seenMax = max(ra.seenMax, v)
	if ra.loaded && v == ra.version {
		return v, nil
	}
	if v == 0 && ra.loaded && ra.version > 0 {
		if !ra.warnedEmpty {
			ra.warnedEmpty = true
			n.log.Warn("the rule store is empty (did Redis lose its data?); keeping the rules in memory until the next write stores them again",
				"version", ra.version)
		}
		return v, nil
	}
	unsigned := false
	// Version 0 without rules: nothing was ever saved (no signature to
	// hold); a node that has rules keeps them (above).
	if ra.signer != nil && (v != 0 || len(specs) != 0) {
		err := ra.signer.verify(v, specs, sig)
		switch {
		case errors.Is(err, errRulesUnsigned) && ra.cfg.AcceptUnsigned:
			unsigned = true
		case err != nil:
			return v, n.refuseStoredLocked(v, err)
		case v < ra.high:
			return v, n.refuseStoredLocked(v, fmt.Errorf("%w: this node has had version %d", errRulesRollback, ra.high))
		}
	}
	set, err := decodeSpecs(specs)
	if err == nil {
		err = n.CheckRules(set)
	}
	if err != nil {
		ra.bad = v
		return v, fmt.Errorf("cannot install rules version %d from the %s: %w", v, ra.source, err)
	}
	if unsigned {
		n.log.Warn("installing an unsigned rule set from the "+ra.source+" (-accept-unsigned-rules): whoever can write to it can install rules; "+
			"the next write through the admin API signs it", "version", v)
	}
	prev, old := n.currentLocked()
	n.installLocked(set, v)
	ra.loaded, ra.warnedEmpty, ra.unsigned = true, false, unsigned
	var prevSet *rules.Set
	if prev != nil {
		prevSet = prev.Set()
	}
	added, removed, changed := rules.Diff(prevSet, set)
	n.log.Info("rules installed from the "+ra.source, "old_version", old, "new_version", v, "rules", set.Len(),
		"added", added, "removed", removed, "changed", changed)
	return v, nil
}

// storedLocked reports whether the store holds set as version v, as this
// node would write it: that version, rules of the same meaning and, with
// a cluster key, a signature that holds. True without a store; false when
// the store cannot be read (the write then tries to save, and says why
// it cannot). A write that changes no rule calls it, so that a set edited
// in the store under this node's version (which polling the version never
// notices) or one this node refused is replaced, not left in place.
func (n *Node) storedLocked(v uint64, set *rules.Set) bool {
	ra := &n.ra
	if ra.cfg.Store == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), ra.cfg.LoadTimeout)
	defer cancel()
	sv, specs, sig, err := ra.cfg.Store.LoadRules(ctx)
	// Version 0 without rules: nothing was ever saved, nothing to sign
	// (as loadStoreLocked has it).
	signed := ra.signer == nil || (sv == 0 && len(specs) == 0) || ra.signer.verify(sv, specs, sig) == nil
	if err != nil || sv != v || !signed {
		return false
	}
	stored, err := decodeSpecs(specs)
	return err == nil && stored.Equal(set)
}

// maxRulesVersion bounds a stored version: versions are JSON numbers in
// the admin API, exact in every client (JavaScript's included) up to
// 2^53. A larger one (written by hand) is refused, so that the next
// version never overflows.
const maxRulesVersion = 1 << 53

// errRulesVersionRange: a stored version above maxRulesVersion.
var errRulesVersionRange = errors.New("its version is out of range (above 2^53)")

// errRulesRollback: a signed set older than one the node installed.
var errRulesRollback = errors.New("older than a version this node installed (a past set stored again)")

// refuseStoredLocked refuses stored version v for err (a signature or
// rollback error): it is not loaded again until the version moves, and is
// counted. The error says what to do.
func (n *Node) refuseStoredLocked(v uint64, err error) error {
	ra := &n.ra
	ra.bad = v
	reason := "bad_signature"
	switch {
	case errors.Is(err, errRulesUnsigned):
		reason = "unsigned"
	case errors.Is(err, errRulesRollback):
		reason = "rollback"
	case errors.Is(err, errRulesVersionRange):
		reason = "version_range"
	}
	n.met.set.GetOrCreateCounter(`sluice_rules_store_refused_total{reason="` + reason + `"}`).Inc()
	keep := "no rules yet: not ready"
	if ra.loaded || ra.version > 0 {
		keep = "keeping version " + strconv.FormatUint(ra.version, 10)
	}
	return fmt.Errorf("refused rules version %d from the %s: %w; %s (a write through the admin API replaces it)",
		v, ra.source, err, keep)
}

// decodeSpecs validates stored rule specs as one set.
func decodeSpecs(specs [][]byte) (*rules.Set, error) {
	list := make([]rules.Spec, 0, len(specs))
	for i, b := range specs {
		s, err := rules.ParseSpec(b)
		if err != nil {
			return nil, fmt.Errorf("rules[%d]: %w", i, err)
		}
		list = append(list, s)
	}
	return rules.NewSet(list)
}

// encodeSpecs is the stored form of set: names and JSON specs in order.
func encodeSpecs(set *rules.Set) ([]string, [][]byte, error) {
	names := make([]string, 0, set.Len())
	specs := make([][]byte, 0, set.Len())
	for _, r := range set.Rules() {
		b, err := json.Marshal(r.Spec)
		if err != nil {
			return nil, nil, fmt.Errorf("cannot encode rule %q: %w", r.Name, err)
		}
		names = append(names, r.Name)
		specs = append(specs, b)
	}
	return names, specs, nil
}

// Gossip of rule versions: after a write, the node broadcasts
// {rulesMsgKind, rulesMsgVersion, uvarint version}; a member receiving a
// version other than its own wakes its poll loop, which loads the set
// from the store (the message is small; the rules stay in the store).
const (
	rulesMsgKind    byte = 'R'
	rulesMsgVersion byte = 1
)

// appendRulesMsg appends the broadcast of version v.
func appendRulesMsg(dst []byte, v uint64) []byte {
	dst = append(dst, rulesMsgKind, rulesMsgVersion)
	return binary.AppendUvarint(dst, v)
}

// parseRulesMsg reads a rules broadcast.
func parseRulesMsg(msg []byte) (uint64, bool) {
	if len(msg) < 3 || msg[0] != rulesMsgKind || msg[1] != rulesMsgVersion {
		return 0, false
	}
	v, k := binary.Uvarint(msg[2:])
	if k <= 0 || k != len(msg)-2 || k != len(binary.AppendUvarint(nil, v)) { // one encoding per version
		return 0, false
	}
	return v, true
}

// isRulesMsg reports whether a gossip message is a rules broadcast.
func isRulesMsg(msg []byte) bool { return len(msg) >= 1 && msg[0] == rulesMsgKind }

// rulesMessage handles a rules broadcast from a peer.
func (n *Node) rulesMessage(msg []byte) {
	v, ok := parseRulesMsg(msg)
	ra := &n.ra
	if !ok || ra.kick == nil {
		return
	}
	ra.mu.Lock()
	have := ra.loaded && v == ra.version
	ra.mu.Unlock()
	if have {
		return
	}
	select {
	case ra.kick <- struct{}{}:
	default:
	}
}

// broadcaster is what the node needs of its membership to announce a
// version (*member.Cluster).
type broadcaster interface{ Broadcast(msg []byte) error }

// announceRules broadcasts version v to the other members, if clustered.
func (n *Node) announceRules(v uint64) {
	c := n.cl
	if c == nil {
		return
	}
	b := c.membership.Load()
	if b == nil {
		return
	}
	bc, ok := b.m.(broadcaster)
	if !ok {
		return
	}
	if err := bc.Broadcast(appendRulesMsg(nil, v)); err != nil {
		n.log.Warn("cannot announce the new rules version; peers will see it at their next poll",
			"version", v, "err", err)
	}
}

// formatVersion is a version as an ETag: a quoted decimal.
func formatVersion(v uint64) string { return `"` + strconv.FormatUint(v, 10) + `"` }
