// Package forward carries checks from a node that does not own their key to
// the node that does: the internal protocol (POST /internal/v1/batch), its
// server side ([NewHandler]) and its client side ([Forwarder]).
//
// This sub-package keeps forwarding testable on its own, against real
// fasthttp servers, without a whole node. The node decides which peer owns
// a key (shard's ring and split plans), calls [Forwarder.Forward], and
// implements [Decider] with its lease.Manager for the items peers send it.
//
// # Batching
//
// A Forwarder keeps one queue and one collector goroutine per peer. The
// collector takes the first waiting item, then keeps collecting until the
// batch holds [Config.MaxBatch] items (256) or [Config.FlushInterval]
// (200µs) has passed since the first item, and hands the batch to a sender
// goroutine: up to [Config.MaxConnsPerPeer] requests are in flight per
// peer, one per connection. While every connection is busy the collector
// keeps adding queued items to the waiting batch (up to MaxBatch), so
// under load batches are full. Each caller blocks until its own results
// are back. [Config.EagerFlush] skips the flush interval: a batch goes as
// soon as a connection is free.
//
// # Failures
//
// A peer that does not answer within [Config.Timeout] (50ms), refuses the
// connection, or answers anything but a valid reply is skipped: every item
// of the batch fails with [ErrPeerUnavailable]. Failures that say the peer
// is up but overloaded (a timeout, 503 or 429, a full queue, the caller's
// deadline passing while queued) wrap [ErrPeerBusy] too: the owner may
// still decide those items, which the node knows when it decides them
// itself (with a shared Store that is safe; on each node's own memory
// store within its share of the limit: node/engine's unanswered.go). The others (connection refused or reset, an
// invalid reply) mean the owner is not deciding: the node decides the
// items itself by leasing from the Store, so a dead peer never becomes an
// error for the gateway. The peer is then marked down for [Config.Backoff]
// (not after a timeout: the engine routes around a silent owner itself):
// items for it fail at once, without a request (with the error of the
// failure that marked it down, busy or not), until the back-off ends
// and the next batch probes it again. Requests are never retried: a batch
// the owner may have decided must not be charged twice.
//
// # Late batches
//
// Every request carries [DeadlineHeader]: when the sender sent it and its
// timeout, by the sender's clock. The owner measures each request's lag
// (how long it queued on the way: its offset, the owner's clock minus the
// sender's timestamp, minus the smallest offset of that sender's requests
// in the last 10–20 s, so the clocks' skew cancels out; a lag past 5 s is
// taken as a clock step and becomes the new reference). A batch whose lag
// already exceeds the sender's timeout is answered 503 without being
// decided; one whose decisions end past it (lag + the time deciding) is
// answered 503 too, and what its allowed checks charged is refunded
// (OpRefund items given to the [Decider]). The sender sheds such a batch
// either way: deciding it would spend tokens on answers nobody reads.
// Counted in
// sluice_forward_rejected_requests_total{reason="late"} and
// sluice_forward_late_refunded_items_total. And the sender keeps waiting
// for a reply after its callers had the timeout (a second more, holding
// that connection): when a late reply comes, it
// sends the owner a refund of every check the owner allowed in it (the
// callers shed them), counted in the same metric. A reply later than that
// still loses the batch's tokens (errs towards admitting less).
//
// # Wire format (version 1)
//
// Both bodies are binary, content type application/x-sluice-batch.
// Integers are unsigned varints (encoding/binary) unless marked zigzag;
// strings are a varint length and the bytes.
//
//	batch:  version=1 | count | count × item
//	item:   op (1 check, 2 refund) | rule | key | hits
//	reply:  version=1 | count | count × result | plans | plans × plan
//	result: flags (1 allowed, 2 degraded, 4 unavailable, 8 error) | limit |
//	        remaining (zigzag) | reset_ms | retry_after_ms | [error]
//	plan:   key | epoch | holders | holders × holder
//
// A body is refused, with an error naming the item and field, if its
// version is not 1, a count or length exceeds its bound ([MaxItems],
// [MaxKeyLen], [MaxRuleLen], [MaxPlans], [MaxHolders]...), a flag or op is
// unknown, or bytes are missing or left over. A reply holds exactly one
// result per item, in order; its plans are the owner's split plans that
// senders should know (hot keys) and are handed to [Config.OnPlans].
//
// # Authentication
//
// With a cluster key, every request is signed and every reply too:
//
//	X-Sluice-Auth: <unix ms>.<hex 16-byte random nonce>.<hex MAC>
//	MAC = HMAC-SHA256(key, "sluice-internal-v1 request" | method | path |
//	                       timestamp (8 bytes, big endian) | nonce | body)
//	X-Sluice-Reply-Auth: hex HMAC-SHA256(key, "sluice-internal-v1 reply" |
//	                       request nonce | reply body)
//
// where every field is length-prefixed (a uvarint), so that no two field
// lists hash alike. The handler refuses with 401 a request whose header is
// missing or malformed, whose MAC is wrong (another key; a body, path,
// method, timestamp or nonce changed on the way), whose timestamp is more
// than [HandlerConfig.Window] (30s) from its clock either way, or whose
// nonce it has seen (a replay). A correctly signed request outside the
// window logs a warning naming the skew, at most every 10s: the nodes'
// clocks disagree. Nonces are remembered for at least 2 × Window (a
// request may arrive up to Window before or after its timestamp), at
// most [HandlerConfig.MaxNonces] per 2 × Window: beyond that requests are
// refused with 503 (and their senders decide locally) rather than let a
// replay through. The sender refuses a reply whose MAC is missing or
// wrong, so an attacker on the path cannot turn a denial into an
// admission either. Comparisons are constant-time (hmac.Equal).
//
// Requests also carry X-Sluice-From, the sender's member name
// ([Config.Self]), covered by the signature, and [DeadlineHeader], signed
// apart:
//
//	X-Sluice-Deadline-Auth: hex HMAC-SHA256(key, "sluice-internal-v1 deadline" |
//	                       request nonce | X-Sluice-Deadline value)
//
// A request whose X-Sluice-Deadline-Auth does not sign its deadline is
// refused with 401 (a deadline moved on the way would make the owner take
// its sender's honest requests for late ones). A request without the
// header, from a node of the previous release during a rolling upgrade, is
// decided as if it had no deadline; such a node ignores the new header and
// checks X-Sluice-Auth as before, so old and new nodes serve each other.
// No other request header changes what the owner does.
//
// # What the owner accepts
//
// The handler answers with an item error, without passing them to the
// [Decider], the items whose rule or key the public API would refuse
// (control characters such as newlines and NUL, invalid UTF-8: api.ValidName
// and api.ValidKey), and the refunds beyond what this node lent the
// sender: for every allowed check with hits it remembers, per sender
// (X-Sluice-From, or the peer's IP address without one) and rule and key,
// the hits charged, for one to two [HandlerConfig.RefundWindow] (10s); a
// refund gives back at most what remains of that and is cut down or
// refused beyond it (sluice_forward_refused_items_total{reason=
// "refund_over_lent"}, sluice_forward_refused_refund_hits_total). So a
// peer, even one holding the key, cannot refund what it was never lent;
// the lease Store bounds the Manager's own returns in the same way.
//
// The link is not encrypted: an observer sees rules, keys and decisions
// (run the internal endpoint on a private network, or behind TLS). A
// cluster without a key (node: ClusterConfig.Insecure) sends and accepts
// unsigned requests; the node logs a warning at start.
//
// # Concurrency
//
// [Forwarder] is safe for concurrent use; it owns its goroutines (per
// peer: one collector, at most MaxConnsPerPeer senders) and stops them in
// [Forwarder.RemovePeer] and [Forwarder.Close]. The handler returned by
// [NewHandler] is safe for concurrent use and calls its [Decider]
// concurrently from fasthttp's goroutines, with items whose strings are
// views of the request body (copy what you keep). The codec functions are
// pure.
package forward
