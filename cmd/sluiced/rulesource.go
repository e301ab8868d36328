package main

import (
	"fmt"

	"github.com/sluicehq/sluice/lua"
	"github.com/sluicehq/sluice/node"
)

// The Redis store keeps the admin API's rules too.
var _ node.RuleStore = (*lua.Store)(nil)

// startRules installs the node's first rule set from its one source
// (docs/rules.md, "Changing rules at runtime"): the -rules file; else,
// with -redis, the rules stored in Redis (loaded before the node reports
// ready, then polled every -rules-poll and announced by gossip; signed
// with the cluster key when there is one, so that write access to Redis
// alone cannot install rules); else the -data-dir file; else none, kept
// in memory (lost at restart).
func (d *daemon) startRules(o options) error {
	switch {
	case o.rules != "":
		if o.dataDir != "" {
			d.log.Warn("-data-dir is ignored: the rules come from the -rules file", "rules", o.rules, "data_dir", o.dataDir)
		}
		if err := d.rl.initial(); err != nil {
			return err
		}
		return d.node.StartRules(node.RulesConfig{File: o.rules})
	case o.redis != "":
		rs, ok := d.store.(node.RuleStore)
		if !ok {
			return fmt.Errorf("the Redis store of %s keeps no rules", lua.RedactURL(o.redis))
		}
		if o.dataDir != "" {
			d.log.Warn("-data-dir is ignored: the rules are stored in Redis", "data_dir", o.dataDir)
		}
		if len(o.clusterKey) == 0 {
			d.log.Warn("the rules stored in Redis are not signed (no -cluster-key): whoever can write to Redis can install rules on every node")
		}
		return d.node.StartRules(node.RulesConfig{Store: rs, Source: node.SourceStore, Poll: o.rulesPoll,
			ClusterKey: o.clusterKey, AcceptUnsigned: o.acceptUnsignedRules})
	case o.dataDir != "":
		ds, err := node.NewDirStore(o.dataDir)
		if err != nil {
			return err
		}
		return d.node.StartRules(node.RulesConfig{Store: ds, Source: node.SourceDataDir, Poll: o.rulesPoll})
	}
	d.log.Warn("no -rules, -redis or -data-dir: rules written through the admin API are kept in memory and lost at restart")
	if err := d.rl.initial(); err != nil {
		return err
	}
	return d.node.StartRules(node.RulesConfig{})
}
