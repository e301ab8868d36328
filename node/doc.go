// Package node is Sluice's HTTP server. It owns the front ends that decode
// checks and answer them (POST/GET /v1/check, /v1/checks, forward-auth
// /v1/auth, /v1/acquire and /v1/release), the lease protocol through which
// gateways and regions hold leases of the Store (POST /v1/lease and
// GET /v1/lease/rules, with the client token: gateway.go), the admin API
// of rules (/v1/rules) with its sources and versions (admin.go,
// rulesource.go), the cluster views (/v1/members, /v1/hotkeys, /v1/stats),
// the dashboard's mount (node/ui), /metrics, /healthz and /readyz, the
// guard of admin endpoints, and the glue of a cluster: membership events
// rebuild the ring, the internal endpoint (/internal/v1/batch) serves
// forwarded batches, hot-key plans reach routing. Every endpoint, with its
// bodies and status codes, is in docs/api.md; the design is in
// docs/architecture.md.
//
// Sub-packages own the rest: node/engine (the decision engine),
// node/rules (rule files and matching), node/api (the wire codec),
// node/member (memberlist), node/forward (the forwarding protocol),
// node/hot (hot keys), node/rls (the Envoy rate limit service),
// node/client (the Go client), node/upstream (a region's node leasing
// global rules from the global tier), node/ui (the dashboard's files).
//
// # Deciding
//
// The node decides nothing itself: every front end here fills an
// engine.Batch (node/engine) and calls the node's engine, then maps each
// request's verdict to a status, a JSON body and the rate-limit headers.
// /v1/check and /v1/auth are one request, /v1/checks one request per check;
// acquire and release are engine operations too, and the internal endpoint
// hands forwarded batches to the engine's owner side. [Node.Engine] gives
// other front ends (node/rls) the same engine. The node adapts
// node/forward and node/hot to what the engine declares it needs
// (engine.Forwarder, engine.Hot). How a request is decided (routing,
// several rules one answer, refunds, shedding) is the engine's package doc
// and docs/architecture.md.
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
// (node/member) calls MembersChanged on every join, leave or failure; the
// node rebuilds the consistent-hash ring (shard.Ring over the live
// members' names) and hands it to the engine, which routes each item to
// ring.Owner(counter key), the key node/client routes by too, after asking
// the hot-key split table (node/hot). After every ring change a goroutine
// owned by the cluster returns the leases of keys this node no longer owns
// and drops the forwarding queues of departed peers.
//
// # Metrics
//
// /metrics writes the Node's set (shared with its engine, which counts
// each rule's decisions), then the process-wide set (the lease package's): sluice_checks_total{rule,decision}, created for every rule
// when a rule set is installed and counted by the node that answered a
// check, whoever decided it; sluice_check_duration_seconds (one check in
// 16 is timed; a batch is one observation of its mean time per check);
// sluice_http_requests_total{path,code}; sluice_checks_skipped_total{rule,
// reason}; sluice_rules; sluice_rules_reload_errors_total; and in a
// cluster sluice_routed_*, sluice_members and sluice_handoffs_total
// (node/forward adds sluice_forward_*, node/hot sluice_hot_*). The list
// with each series' meaning is in docs/api.md. Every family's # HELP line
// says what it counts, in which unit: each package that registers metrics
// has a MetricsHelp function beside its registrations, which /metrics
// combines (metrics.go).
//
// # Concurrency
//
// A Node is safe for concurrent use (Decide too, each call with its own
// Batch). SetRules and SetRulesError may be called at any time (rules are
// swapped atomically); requests in flight finish with the set they started
// with. EnableCluster must be called before Serve; MembersChanged and
// SetMembership at any time after it.
package node
