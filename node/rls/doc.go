// Package rls is Sluice's Envoy rate limit service: a gRPC server of
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit (the API of
// envoyproxy/ratelimit, served by the package's own HTTP/2 transport or by
// google.golang.org/grpc, with the types of go-control-plane) and the
// loader of envoyproxy/ratelimit's YAML configuration, read unchanged. It
// owns the configuration (parsing, validation, matching a request's
// descriptors to limits), the call (statuses, headers, metrics) and the
// reload of the files; decisions are the node's (see Engine): the same
// rules, leases and cluster routing as HTTP checks.
//
// # Configuration
//
// A file, or every *.yaml/*.yml file of a directory (one domain per file;
// a domain in two files is refused), with every field envoyproxy/ratelimit
// accepts and its meaning:
//
//	domain: messaging
//	descriptors:
//	  - key: message_type
//	    value: marketing              # '*' anywhere: a wildcard (api*v2)
//	    share_threshold: false        # true: the values a wildcard matches share one counter
//	    value_to_metric: false        # metrics named by the request's value
//	    descriptors:
//	      - key: to_number            # no value: each number counted apart
//	        rate_limit: {unit: day, requests_per_unit: 5}
//	  - key: to_number
//	    rate_limit:
//	      unit: day                   # second minute hour day week month(30d) year(365d)
//	      requests_per_unit: 100      # 0 (or left out) denies every request
//	      name: per-number            # for replaces
//	      replaces: [{name: other}]   # a matched limit named "other" is dropped
//	      unlimited: false            # true: always OK, limit_remaining 2^32-1
//	      algorithm: fixed_window     # Sluice extension: sliding_window, token_bucket, gcra, sliding_log
//	    shadow_mode: false            # count, but always answer OK
//	    quota_mode: false             # over: OVER_LIMIT overall only if every quota_mode one is
//	    detailed_metric: false        # metrics per request value
//	    metadata: {team: sms}         # to dynamic_metadata (ServerConfig.DynamicMetadata)
//
// Matching follows envoyproxy/ratelimit: a request descriptor's entries
// walk down the tree, at each level by envoy's composite key key_value
// first, then the wildcards in file order (each '*' matching any run of
// bytes of key_value), then the key alone; only the descriptor reached by
// the last entry applies (a descriptor with a limit but more request
// entries than levels does not match). Each configured limit that counts
// is a Sluice rule (fixed_window by default: envoy's windows are aligned
// on the Unix epoch, as Sluice's), named "rls." plus a readable part of
// the domain and path and a hash (see the metric
// sluice_checks_total{rule}); its counter key is the request entries'
// values (an entry that matched a share_threshold wildcard counts as the
// pattern), so a key-only descriptor counts each value apart.
//
// YAML is read as envoy's library (YAML 1.1) reads it: yes/no/on/off are
// booleans, merge keys are expanded, the last of a key given twice counts.
// A file envoy refuses is refused with a [*ConfigError] naming the file,
// line, domain, descriptor path and field (an unknown field anywhere, a
// list of anything but mappings, a number with a fraction, two descriptors
// of a level with one key_value, share_threshold without a wildcard, a
// limit replacing itself, unlimited with a unit); a reload that fails keeps
// the last good configuration. What envoy accepts but ignores (one of its
// fields where it means nothing, a key given twice, a requests_per_unit
// left out) loads with a warning each ([Config.Warnings], logged by the
// Reloader).
//
// # Calls
//
// Statuses come back in descriptor order with current_limit (with its
// name), limit_remaining and duration_until_reset (envoy's whole seconds
// to the end of the unit's window on ServerConfig.Now's clock, unit − now %
// unit; one of Sluice's other algorithms: its reset, rounded up to a
// second). overall_code is OVER_LIMIT when a status is, but quota_mode
// ones: those make it OVER_LIMIT only when every quota_mode status of the
// request is. A descriptor without a configured limit, or whose limit is
// replaced, is OK without current_limit. Hits are the request's
// hits_addend (0 means 1), or the descriptor's own hits_addend when set (0
// peeks). With ServerConfig.ResponseHeaders, response_headers_to_add
// carries the headers of the status with the least remaining:
// RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset
// (envoyproxy/ratelimit's names) and RateLimit-Policy, RateLimit
// (draft-ietf-httpapi-ratelimit-headers, as Sluice's HTTP answers). With
// ServerConfig.DynamicMetadata, dynamic_metadata is envoy's (its
// RESPONSE_DYNAMIC_METADATA): the domain, the descriptors, and the
// metadata of the matched limits not over them, merged.
//
// Charging, chosen to give the codes envoyproxy/ratelimit gives for fixed
// windows: envoyproxy/ratelimit adds every descriptor's hits to its
// counter, whether or not that descriptor or another one is over limit.
// So each descriptor is decided on its own (a denied descriptor does not
// refund the others, unlike a multi-rule HTTP check), and a denied
// descriptor whose window still had some room (a hits_addend larger than
// what was left) takes what was left, so that later requests in the window
// are denied as envoy's over-full counter denies them. Hits of a denied
// request beyond the limit are not recorded (Sluice never stores more than
// the limit); for fixed windows the codes are the same, but for a peek (0
// hits) after a denial in the window: OK here, OVER_LIMIT on envoy.
//
// Bad requests (no domain, no descriptors, an entry without a key, more
// than MaxDescriptors descriptors or MaxEntries entries, oversized keys,
// values or hits_addend) are answered INVALID_ARGUMENT with a message
// naming the field; the server never panics on input. Messages are
// bounded to 256 KiB.
//
// Not supported: the per-request limit override of a descriptor (its
// limit field is ignored), envoyproxy/ratelimit's global shadow and quota
// modes, MERGE_DOMAIN_CONFIG and the xDS configuration source.
//
// # Metrics
//
// Per domain and descriptor, like envoyproxy/ratelimit's statistics:
// sluice_rls_total_hits, sluice_rls_over_limit, sluice_rls_near_limit and
// sluice_rls_shadow_mode, labelled {domain, descriptor}: descriptor is the
// name envoy gives the statistic, less the domain (the KEY_VALUE path;
// with detailed_metric or value_to_metric, the request's values as envoy
// puts them in, for at most 10000 series). Plus sluice_rls_calls_total{code} (OK, OVER_LIMIT,
// INVALID_ARGUMENT, UNAVAILABLE, INTERNAL), sluice_rls_config_loads_total
// and sluice_rls_config_errors_total. The server also serves the gRPC health
// service (grpc.health.v1), SERVING once a configuration is loaded and
// NOT_SERVING once Close has begun (on TransportLean, its Check only).
//
// # Transports
//
// ServerConfig.Transport chooses the HTTP/2 server that carries the calls.
// TransportLean, the default, is Sluice's own, for the service's unary
// calls only, at a fraction of the CPU per call of TransportGRPC, grpc-go's
// server. Both speak gRPC over HTTP/2 with prior knowledge (what Envoy's
// gRPC client and grpc-go's client speak): cleartext, or TLS with
// ServerConfig.TLS, ALPN h2 (a client that negotiates none is refused) and
// the client certificates its ClientAuth and ClientCAs ask for (with
// tls.RequireAndVerifyClientCert, a client without one, or with one that
// another CA signed, is refused in the handshake, before any HTTP/2 frame).
//
// TransportLean reads frames with golang.org/x/net/http2's Framer and
// decodes header blocks with golang.org/x/net/http2/hpack. A connection
// has one reader goroutine, which parses frames and assembles each
// stream's request. A finished request goes to a long-lived worker (a pool
// of 128 shared by the server; a goroutine of its own when all are busy),
// since a decision may block on the Store or on a forward to the key's
// owner. The worker decodes the request into pooled messages, answers, and
// appends its response's frames to the connection's write buffer; their
// header blocks are constant bytes encoded once (HPACK literals that never
// touch the peer's dynamic table, valid on every connection). The worker
// that finds nobody writing writes, outside the lock, until the buffer is
// empty: no writer goroutine, about one write per batch of responses; the
// reader's own frames (SETTINGS and PING ACKs, resets) go out once it has
// read the input it holds. Flow control: a stream's window (1 MiB) holds
// any request, so streams need no WINDOW_UPDATE; the connection's (4 MiB)
// is given back as calls decode their requests; responses go out as the
// peer's windows allow, the rest once it sends WINDOW_UPDATE or raises
// SETTINGS_INITIAL_WINDOW_SIZE, either of which costs the same whatever the
// number of streams (a new initial window moves every stream's window at
// once; held-back responses wait in a heap whose top says whether any may
// send).
//
// Bounds, on both transports:
//
//   - connections: ServerConfig.MaxConns (10000 by default) served at once
//     from a listener, past which new connections wait in the listener's
//     accept backlog until a served one closes (TransportGRPC:
//     golang.org/x/net/netutil.LimitListener; TransportLean the same in its
//     accept loop, keeping the TCP connection's CloseWrite for its graceful
//     close); 10 s for the TLS handshake, the preface and the client's
//     SETTINGS; ServerConfig.IdleTimeout (5 min by default) with no call in
//     flight and no request received whole, after which a connection is
//     closed as Close closes it (GOAWAY, then close once its streams are
//     done). A request still arriving keeps no connection busy
//     (TransportGRPC: grpc-go's MaxConnectionIdle, which counts any stream,
//     and a connection found idle so when it opens a stream is closed).
//   - streams: 1024 at once on a connection, past which they are refused
//     (REFUSED_STREAM; on TransportLean a call whose stream the peer reset
//     counts until its worker finishes, so that resets pile up no work).
//   - SETTINGS: 64 parameters between two requests a connection sends
//     whole, 4 of them raises of SETTINGS_INITIAL_WINDOW_SIZE; past either
//     the connection is closed (TransportLean: GOAWAY(ENHANCE_YOUR_CALM)).
//     TransportLean applies each in constant time; grpc-go queues each
//     SETTINGS for its writer, which walks every stream for each raise.
//   - requests that have not arrived whole (from HEADERS to END_STREAM):
//     ServerConfig.RequestTimeout each (10 s by default), past which the
//     stream is reset and its buffers freed (TransportLean answers
//     DEADLINE_EXCEEDED, TransportGRPC CANCELLED); ServerConfig.MaxPendingBytes
//     (64 MiB by default) of them across the server's connections, beyond
//     16 KiB that each connection holds of its own, each charged its bytes
//     and a share for its stream (1 KiB on TransportLean, 8 KiB with its
//     handler's goroutine on TransportGRPC): a request past it is refused
//     (TransportLean: RST_STREAM(REFUSED_STREAM)), or its connection closed
//     (TransportGRPC: grpc-go lets no stream be reset from outside but
//     through its context). A request sent whole in one go (HEADERS, then
//     DATA with END_STREAM, as Envoy and gRPC clients send) is never
//     charged. A node holds at most MaxConns × 16 KiB plus MaxPendingBytes
//     of them; sluice_rls_pending_bytes is what they draw on the budget,
//     sluice_rls_unfinished_reset_total{reason} counts those reset (timeout,
//     budget).
//   - messages: 256 KiB (RESOURCE_EXHAUSTED).
//
// TransportLean's own bounds: a 16 KiB header list, 16 KiB frames, 4 MiB of
// responses the peer has not read and 10 s for a write to go out (past
// either, the connection is closed), 10000 PING frames between two
// requests received whole (ENHANCE_YOUR_CALM). A protocol error closes
// that connection only (GOAWAY); a malformed request (RFC 9113 8.1.1: a
// content-length its DATA does not match, say) resets its stream; a
// request its headers refuse (an unknown method, a method other than POST,
// another content-type) is answered once it ends. Close says
// GOAWAY(NO_ERROR) on every connection, refuses new streams, and closes
// each once its calls are answered, or when Close's context ends.
// TransportGRPC's stream windows are fixed at 64 KiB (no BDP growth), its
// PINGs bounded by grpc-go's keepalive enforcement.
//
// Not served by TransportLean: HTTP/1.1's upgrade to h2c, streaming calls
// (the health service's Watch, which grpc-go's transport serves, is
// answered UNIMPLEMENTED, as is any method other than ShouldRateLimit and
// the health service's Check), compressed messages (UNIMPLEMENTED) and
// grpc-timeout: a call's deadline is the engine's own bounds (the Store's
// timeout, a forward's), and Envoy resets the stream when its own timeout
// fires (the answer is then dropped).
//
// # Concurrency
//
// A Server is safe for concurrent use; SetConfig swaps the configuration
// atomically. A Config is immutable. A Reloader is used from one goroutine.
package rls
