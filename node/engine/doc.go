// Package engine decides checks: the batch, the rule table, routing
// (the ring, hot-key splits, forwarding to owners as a step), decisions,
// verdicts and refunds. It knows no HTTP and no wire format.
//
// Every front end (the HTTP checks and forward-auth, the Envoy RLS
// server, the internal endpoint peers forward to, the dashboard) fills a
// Batch with requests of (rule, key, hits) items and calls
// Engine.Decide. One path decides them all, on a single node as in a
// cluster: a single node is a cluster of one (a ring of itself, no
// peers), so routing is a step that sends nothing.
//
//  1. resolve: each item's rule, policy (overrides applied) and counter
//     key; a request with a bad item (an unknown rule, an invalid key) is
//     not decided (Request.Err).
//  2. the leased phase: the leased items of every request, split by where
//     they are decided (route.go: this node's Manager, or the owner peer
//     in one forwarding call per peer, all peers at once);
//  3. the exact phase: the exact items (sliding_log) of the requests that
//     nothing denied, the same way;
//  4. refunds: the hits charged to the items of a denied (or failed)
//     request go back where they were charged;
//  5. the verdict of each request (combine).
//
// The owner side of forwarding (DecideOwned) decides what peers send
// through the same batch path, minus routing; acquire and release of
// concurrency slots (Acquire, Release) and refunds are engine operations
// too, and so are the lease protocol's ops (lease.go: Lease routes each
// op of a holder outside the cluster to its key's owner, whose lessor
// applies it with its Store within the rule's bounds; DecideOwnedLeases
// is the owner's side). Per-rule decisions are counted in one place (Batch.recordAs: an
// owner counts nothing, the node that answered the client does), and
// what a decision charged (so may be refunded) is said in one place
// (Charged). Every key passes one validation before routing
// (KeyProblem). An owner that does not answer is, for the checks waiting
// on it, a Store that does not answer: never shed; decided here from the
// shared Store (Redis), or by the rule's on_store_failure within this
// node's share of the limit on the memory store, where a node in the
// minority of a partition holds all its checks to their share
// (unanswered.go, which says why this is safe); one that stops answering
// altogether is routed around (demote.go).
//
// # Rooms and imports
//
// The engine imports lease (the Manager), node/rules (the rule set),
// shard (the ring) and metrics; it declares what it needs from a
// forwarder (Forwarder) and from hot-key splitting (Hot), which the node
// adapts from node/forward and node/hot. It imports neither fasthttp nor
// a wire codec. Front ends import the engine: node (the HTTP API, the
// internal endpoint's Decider), node/rls (gRPC); cmd/sluiced wires them.
//
// # Concurrency
//
// An Engine is safe for concurrent use: Decide, DecideOwned, Acquire and
// Release each with a Batch of their own (a Batch is not safe for
// concurrent use; keep it in a sync.Pool and Reset it, so that deciding
// allocates nothing once its buffers have grown). SetRules and SetRoutes
// swap immutable snapshots atomically: a call in flight finishes with the
// ones it started with. EnableCluster must be called before the first
// Decide.
package engine
