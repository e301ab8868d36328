// Package node is Sluice's HTTP server. It owns the front ends that decode
// checks and answer them (POST/GET /v1/check, /v1/checks, forward-auth
// /v1/auth, /v1/acquire and /v1/release), the admin API of rules with its
// sources and versions (admin.go, rulesource.go), the cluster views
// (/v1/members, /v1/hotkeys, /v1/stats), the dashboard's mount (node/ui),
// /metrics, /healthz and /readyz, the guard of admin endpoints, and the
// glue of a cluster: membership events rebuild the ring, the internal
// endpoint serves forwarded batches, hot-key plans reach routing. Every
// endpoint, with its bodies and status codes, is in docs/api.md; the
// design is in docs/architecture.md.
//
// Sub-packages own the rest: node/rules (rule files and matching),
// node/api (the wire codec), node/member (memberlist), node/forward (the
// forwarding protocol), node/hot (hot keys), node/rls (the Envoy rate
// limit service), node/client (the Go client), node/ui (the dashboard's
// files).
//
// # Deciding
//
// Every front end decides through one method, [Node.Decide]:
//
//	func (n *Node) Decide(ctx context.Context, b *Batch)
//
// A [Batch] holds one or more requests, each a set of (rule, key, hits)
// [Item]s added with Batch.Add and closed with Batch.End. Decide decides
// each request as one, in the order of the batch, and sets each request's
// verdict ([Request]: Status 200, 429 or 503, the reported item Rep,
// Degraded, or Err for a request not decided: an unknown rule, hits on a
// concurrency rule, no rules yet) and each item's Decision and Policy.
// /v1/check and /v1/auth are one request, /v1/checks one request per
// check; the Envoy RLS server and the dashboard use it the same way. A
// Batch is reused (Reset) so that deciding allocates nothing once warm.
//
// Decide resolves each item (rule, policy, counter key), decides the
// leased items of every request, then the exact items of the requests
// nothing denied, each phase split by where an item is decided (this
// node's lease.Manager, with one TakeMany for the batch's single-item
// requests; in a cluster, each peer's items in one forwarding call), then
// refunds, then combines each request's verdict. A single node is a
// cluster of one: its ring holds itself alone and routing costs one
// length check per item.
//
// # Several rules, one answer
//
// A request (descriptors, forward-auth) may match several rules; it is
// allowed only if every rule allows. Leased rules are decided first, then
// exact ones (sliding_log), so a request denied by a leased rule never
// touches an exact rule. When one rule denies, the hits charged to the
// rules that allowed are refunded where they were charged: a denied
// request burns no quota (a sliding_log stamp already recorded when a
// later exact rule denies cannot be taken back: put at most one exact rule
// on a request path). A denial is answered with the denying rule with the
// longest retry-after (429 if any rule denied on its limit, else 503 for
// rules that fail closed); an allowed request with the rule with the
// least remaining. Shadow rules are decided and counted but never deny.
// Concurrency rules are not matched by descriptors or forward-auth: they
// need /v1/acquire and /v1/release; /v1/check may only peek at them
// (hits=0).
//
// # Lease ids
//
// /v1/acquire answers a lease_id of the form rule~base64url(key)~id, where
// id is the Manager's random slot id, so that /v1/release needs only
// {"lease_id"}: the rule and key are read back from it (when the request
// also names them, they must agree). Rule names cannot contain '~' and
// base64url never does. api.MaxLeaseIDLen (512 bytes) fits the longest
// rule name and key.
//
// # The hot path allocates nothing
//
// A check by rule and key allocates nothing once its key has a bucket: the
// body is decoded with api.DecodeCheckView (strings are views of the
// request body), and the counter key rule + ":" + key is built in the
// Batch's buffer and passed to the lease Manager as a view, which is safe
// because the Manager copies a key only when it keeps it. So a string
// taken from a decoded request or an item's counter key must be cloned
// (strings.Clone) by any code that keeps it past the request (a
// forwarding queue, a hot-key sketch, a log record kept by an async
// handler).
//
// # Cluster
//
// EnableCluster makes a Node one member of a cluster. Membership
// (node/member) calls MembersChanged on every join, leave or failure,
// which rebuilds the consistent-hash ring (shard.Ring over the live
// members' names) and swaps it in atomically. Each item's owner is
// ring.Owner(counter key), the key node/client routes by too; routing asks
// the hot-key split table (node/hot) first. Items this node owns go to its
// Manager; the others go to their owner through a per-peer
// forward.Forwarder queue, and the owner decides them with its own rules
// and Manager. When a forward fails, the item is shed (503 with
// Retry-After) if the owner is alive but overloaded (a timeout, a 503 or
// 429 from it, a full queue, the Forwarder's back-off), because the owner
// may still be deciding the key; it is decided here from the shared Store
// if the owner cannot be deciding it (connection refused, marked dead or
// left, an invalid reply, a rule it does not know yet). /v1/acquire and
// /v1/release are not forwarded: concurrency runs its script on the
// shared Store at every call. After every ring change a goroutine owned by
// the cluster returns the leases of keys this node no longer owns and
// drops the queues of departed peers.
//
// # Metrics
//
// /metrics writes the Node's own set, then the process-wide set (the lease
// package's): sluice_checks_total{rule,decision}, created for every rule
// when a rule set is installed and counted by the node that answered a
// check, whoever decided it; sluice_check_duration_seconds (one check in
// 16 is timed; a batch is one observation of its mean time per check);
// sluice_http_requests_total{path,code}; sluice_checks_skipped_total{rule,
// reason}; sluice_rules; sluice_rules_reload_errors_total; and in a
// cluster sluice_routed_*, sluice_members and sluice_handoffs_total
// (node/forward adds sluice_forward_*, node/hot sluice_hot_*). The list
// with each series' meaning is in docs/api.md.
//
// # Concurrency
//
// A Node is safe for concurrent use (Decide too, each call with its own
// Batch). SetRules and SetRulesError may be called at any time (rules are
// swapped atomically); requests in flight finish with the set they started
// with. EnableCluster must be called before Serve; MembersChanged and
// SetMembership at any time after it.
package node
