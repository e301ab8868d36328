package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/rules"
)

// maxRuleFileBytes bounds the rule file read (node/rules bounds it again).
const maxRuleFileBytes = 16 << 20

// reloader keeps the node's rules in step with the rule file. Its methods
// are called from one goroutine at a time (initial, then loop).
type reloader struct {
	path string
	node *node.Node
	log  *slog.Logger

	// What the last read saw: the file's stat, and the hash of the content
	// last read (loaded or refused), so that an unchanged file is not
	// parsed again and a refused one is not logged every poll.
	modTime time.Time
	size    int64
	hash    uint64
	read    bool
	// lastErr is the last error reported, so that a file that stays
	// unreadable is reported once, not every poll.
	lastErr string
}

// initial loads the rule file at start; an error means the node must not
// start. Without a file the node runs with no rules.
func (r *reloader) initial() error {
	if r.path == "" {
		r.node.SetRules(nil)
		return nil
	}
	set, err := r.load(true)
	if err != nil {
		return err
	}
	r.node.SetRules(set)
	r.log.Info("rules loaded", "path", r.path, "rules", len(set.Rules()))
	return nil
}

// loop polls the file every poll and reloads it on SIGHUP, until ctx ends.
func (r *reloader) loop(ctx context.Context, poll time.Duration, hup <-chan os.Signal) {
	if r.path == "" {
		poll = time.Hour // nothing to poll; still drain SIGHUP
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.reload(false)
		case <-hup:
			r.log.Info("SIGHUP: reloading rules", "path", r.path)
			r.reload(true)
		}
	}
}

// reload reads the file if it changed (or force) and installs it, or
// records the error and keeps the last good set.
func (r *reloader) reload(force bool) {
	if r.path == "" {
		return
	}
	set, err := r.load(force)
	switch {
	case err != nil:
		if err.Error() != r.lastErr {
			r.lastErr = err.Error()
			r.node.SetRulesError(err)
		}
	case set != nil:
		r.lastErr = ""
		r.node.SetRules(set)
		r.log.Info("rules reloaded", "path", r.path, "rules", len(set.Rules()))
	}
}

// load returns the parsed file, or nil, nil when it has not changed since
// the last read (unless force).
func (r *reloader) load(force bool) (*rules.Set, error) {
	fi, err := os.Stat(r.path)
	if err != nil {
		r.read = false
		return nil, fmt.Errorf("cannot read rules: %w", err)
	}
	if !force && r.read && fi.ModTime().Equal(r.modTime) && fi.Size() == r.size {
		return nil, nil
	}
	f, err := os.Open(r.path)
	if err != nil {
		r.read = false
		return nil, fmt.Errorf("cannot read rules: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxRuleFileBytes+1))
	if err != nil {
		r.read = false
		return nil, fmt.Errorf("cannot read rules: %w", err)
	}
	if len(data) > maxRuleFileBytes {
		r.read = false
		return nil, fmt.Errorf("cannot read rules: %s is larger than %d bytes", r.path, maxRuleFileBytes)
	}
	h := xxhash.Sum64(data)
	changed := !r.read || h != r.hash
	r.modTime, r.size, r.hash, r.read = fi.ModTime(), fi.Size(), h, true
	if !changed && !force {
		return nil, nil
	}
	set, err := rules.Parse(data)
	if err == nil && r.node != nil {
		err = r.node.CheckRules(set) // a global rule as the global tier has it
	}
	if err != nil {
		return nil, fmt.Errorf("cannot load rules from %s: %w", r.path, err)
	}
	return set, nil
}
