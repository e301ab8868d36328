package node

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/node/member"
)

// readyz answers 200 once a rule set is loaded (503 before), with the rule
// count, whether the last reload failed, and the state of the Store's
// breaker. An open breaker does not make the node unready: checks are
// still answered (local rules enforce from memory). A member that sees
// fewer than a majority of the members it last knew (the minority of a
// partition) is not ready, so that load balancers drain it; "quorum" and
// "reason" say so. /readyz is public:
// the reload error itself (it may name the rule file and rules) is shown
// to admin callers only, others get readyzReloadFailed.
func (n *Node) readyz(ctx *fasthttp.RequestCtx) {
	t := n.eng.Table()
	var body struct {
		Ready           bool   `json:"ready"`
		Rules           int    `json:"rules"`
		Joined          bool   `json:"joined"`
		LastReloadError string `json:"last_reload_error,omitempty"`
		LastReload      string `json:"last_reload,omitempty"`
		Store           struct {
			// State is the breaker's: closed (healthy), open (failing:
			// rules follow on_store_failure) or half-open (probing).
			State string `json:"state"`
		} `json:"store"`
		// Reason says why the node is not ready.
		Reason string `json:"reason,omitempty"`
		// Quorum is what a member sees of the members it last knew.
		Quorum *member.Quorum `json:"quorum,omitempty"`
		// Upstream is the global tier's state (sluiced -upstream): like
		// the Store's, an unreachable upstream does not make the node
		// unready (global rules decide from what the node holds, then by
		// on_store_failure and regional_floor).
		Upstream *readyzUpstream `json:"upstream,omitempty"`
	}
	body.Store.State = n.mgr.Store().State().String()
	if u := n.cfg.Upstream; u != nil {
		ok, err := u.State()
		body.Upstream = &readyzUpstream{Reachable: ok}
		if err != nil {
			body.Upstream.Error = err.Error()
		}
	}
	n.reload.Lock()
	if n.reload.err != nil {
		body.LastReloadError = readyzReloadFailed
		if n.adminAllowed(ctx) {
			body.LastReloadError = n.reload.err.Error()
		}
	}
	if !n.reload.when.IsZero() {
		body.LastReload = n.reload.when.UTC().Format(time.RFC3339)
	}
	n.reload.Unlock()
	body.Joined = n.clusterReady()
	body.Ready = t != nil && body.Joined
	if q, ok := n.cl.quorum(); ok {
		body.Quorum = &q
		if q.Minority {
			body.Ready = false
		}
	}
	switch {
	case t == nil:
		body.Reason = "no rules loaded yet"
	case !body.Joined:
		body.Reason = "not joined to the cluster yet"
	case body.Quorum != nil && body.Quorum.Minority:
		body.Reason = fmt.Sprintf("sees %d of the %d members it last knew (missing: %s): the minority of a partition",
			body.Quorum.Seen, body.Quorum.Known, strings.Join(body.Quorum.Missing, ", "))
	}
	if t != nil {
		body.Rules = t.Len()
	}
	if !body.Ready {
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
	}
	b, _ := json.Marshal(body)
	ctx.SetContentTypeBytes(contentTypeJSON)
	ctx.SetBody(b)
}

type readyzUpstream struct {
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"`
}

// readyzReloadFailed is /readyz's last_reload_error for a caller that is
// not admin.
const readyzReloadFailed = "the last reload failed (the reason is shown to admin callers)"
