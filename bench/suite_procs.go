package bench

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// ruleFile writes the rules every node of the suite runs with: the
// accuracy rule (the configured Limit), its per-second fixed window, and a
// limit no workload reaches.
func (st *suite) ruleFile() (string, error) {
	l := st.cfg.Limit
	yaml := fmt.Sprintf(`# Written by sluice-bench: the rule the accuracy figures are measured against.
rules:
  - name: bench
    algorithm: token_bucket
    limit: %d
    period: %s
    burst: %d
    key: header:X-Bench-Key
  # Per-second fixed windows (envoyproxy/ratelimit's unit: second), the
  # same limit. No key: only explicit checks reach it.
  - name: bench-fw
    algorithm: fixed_window
    limit: %d
    period: 1s
  # Limits no workload reaches: every check is allowed (the node's best
  # case). No key: only explicit checks reach it.
  - name: bench-big
    algorithm: token_bucket
    limit: 1000000000
    period: 1s
`, l.Limit, l.Period, l.Burst, l.Limit)
	path := filepath.Join(st.tmp, "rules.yaml")
	return path, os.WriteFile(path, []byte(yaml), 0o644)
}

// rlsFile writes the Envoy rate limit service configuration of the RLS
// phases: envoyproxy/ratelimit's YAML, a per-second limit (unit: second,
// counted as a fixed window, as envoy counts) of the rule's limit on
// each value of the descriptor entry "user" in domain "bench".
func (st *suite) rlsFile() (string, error) {
	yaml := fmt.Sprintf(`# Written by sluice-bench: the RLS phases' configuration.
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: %d}
`, st.cfg.Limit.Limit)
	path := filepath.Join(st.tmp, "rls.yaml")
	return path, os.WriteFile(path, []byte(yaml), 0o644)
}

// startNode starts sluiced; redisAddr "" means the in-memory store. extra
// are more flags.
func (st *suite) startNode(name, rules, redisAddr string, extra ...string) (*Process, string, error) {
	addr, err := FreePort()
	if err != nil {
		return nil, "", err
	}
	gossip, err := FreePort()
	if err != nil {
		return nil, "", err
	}
	// A cluster (of one) needs a cluster key: a fresh one per node.
	var key [32]byte
	_, _ = rand.Read(key[:])
	if st.token == "" {
		var tok [16]byte
		_, _ = rand.Read(tok[:])
		st.token = base64.RawURLEncoding.EncodeToString(tok[:])
	}
	args := []string{"-listen", addr, "-rules", rules, "-gossip", gossip, "-log-level", "warn",
		"-cluster-key", base64.StdEncoding.EncodeToString(key[:]), "-client-token", st.token}
	if redisAddr != "" {
		args = append(args, "-redis", redisAddr)
	}
	args = append(args, extra...)
	p, err := StartProcess(name, st.cfg.Sluiced, args...)
	if err != nil {
		return nil, "", err
	}
	if err := WaitHTTP(addr, "/healthz", p, 15*time.Second); err != nil {
		p.Stop(5 * time.Second)
		return nil, "", err
	}
	return p, addr, nil
}

// startCeiling starts `sluice-bench ceiling` as its own process, so that
// its CPU is measured like the node's.
func (st *suite) startCeiling(canned CannedSet) (*Process, string) {
	path := filepath.Join(st.tmp, "canned.json")
	if err := SaveCanned(path, canned); err != nil {
		st.note("ceiling skipped: cannot write canned answers: %v", err)
		return nil, ""
	}
	addr, err := FreePort()
	if err != nil {
		st.note("ceiling skipped: %v", err)
		return nil, ""
	}
	p, err := StartProcess("ceiling", st.cfg.Self, "ceiling", "-listen", addr, "-canned", path)
	if err == nil {
		if err = WaitHTTP(addr, "/v1/check", p, 10*time.Second); err != nil {
			p.Stop(5 * time.Second)
		}
	}
	if err != nil {
		st.note("ceiling skipped: the ceiling server did not start: %v", err)
		return nil, ""
	}
	return p, addr
}
