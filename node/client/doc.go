// Package client is the Go client of a Sluice cluster. It learns the
// member list from GET /v1/members, builds the same consistent-hash ring
// as the nodes (shard.NewRing over the live members' names, with the
// cluster's vnodes) and sends each check straight to the owner of its
// counter key, rule + ":" + key, so that no node has to forward it.
//
// # Routing
//
//   - Check, Acquire and Release go to the ring owner of rule:key.
//   - Checks by descriptors cannot be routed by the client (it does not
//     know the rules): they go to any node, round-robin; that node
//     forwards to the owners.
//   - CheckMany groups its checks by owner and sends one POST /v1/checks
//     per owner (in chunks of at most api.MaxBatch checks), all owners in
//     parallel, and puts the results back in the caller's order.
//   - With Config.BatchWindow > 0, concurrent Checks for the same node are
//     queued for up to BatchWindow (or until BatchSize are queued) and sent
//     together as one POST /v1/checks; each caller still gets its own
//     result or error. Without it each Check is one POST /v1/check.
//   - A node that answers /v1/members with 404 (a single node without
//     clustering) makes the client treat the nodes it was given
//     (Config.Nodes) as the cluster: every check goes to any of them,
//     round-robin.
//
// # Failures
//
// A node whose request fails at the transport level (refused, reset,
// timed out) is marked down for Config.DownBackoff and the member list is
// refreshed in the background. The request is sent again to another live
// node (at most Config.MaxAttempts attempts in all; when every node has
// been tried, one is tried again), which forwards it to the owner or
// decides it itself, only when it never reached the node: the connection
// could not be made (refused, dial timeout). A request that timed out, or
// whose connection broke after it was written, may have been decided by
// the node: it is not sent again (that charged a slow check twice, and an
// Acquire could hold a slot nobody releases), and the error is returned.
// (fasthttp resends, once, a request whose kept-alive connection the node
// had already closed.) A timeout of the caller's own context deadline does
// not mark the node down. While the owner is down its keys go to the other
// nodes, round-robin.
//
// HTTP answers are never retried: 200 and 429 are decisions; 400 comes back
// as a *api.FieldError naming the field (errors.Is(err, api.ErrInvalid));
// 503 as an error matching ErrUnavailable; any other status as a
// *StatusError.
//
// Invalid input (a bad rule name, key, hits or lease id) is refused before
// any network call, with the same *api.FieldError the node would answer.
//
// # Tokens
//
// A token the client sends (Config.AdminToken with /v1/members; a
// Limiter's client token with every request) travels in the clear over
// http://: when a node it is sent to is not on loopback, the client logs
// a warning once per node address (Config.Logger). Give the nodes as
// https:// (Config.TLS verifies them).
//
// # Admin
//
// [Admin] calls one node's admin API (versioned rules, members, hot keys)
// and its check endpoint over net/http, for tools such as the sluice CLI;
// it is not built for the hot path and does no routing. See admin.go.
//
// # Concurrency
//
// A Client is safe for concurrent use. It owns one goroutine, which
// refreshes the member list every Config.RefreshInterval and after
// failures; Close stops it, answers the open batches with ErrClosed, waits
// for batches in flight, and is idempotent. A batch's timer is a
// time.AfterFunc owned by the Client and awaited by Close. Each node gets its own
// fasthttp.HostClient (a pool of keep-alive connections). The member view is
// swapped atomically, so checks never wait for a refresh.
package client
