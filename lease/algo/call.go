package algo

import "time"

// The arguments and answers of a Store's calls, which the algorithms'
// math takes and returns (see "Lent tokens" in the lease package doc for
// what a Store does with them).

// Grant is the answer of a lease call.
type Grant struct {
	// Granted is the number of tokens taken from the Store (0 when it could
	// not meet need).
	Granted int64
	// Remaining is the whole tokens left in the Store after the call.
	Remaining int64
	// Wait is, when nothing was granted, the time until need tokens will be
	// available; zero otherwise.
	Wait time.Duration
	// Reset is the time until the limit would be fully available again
	// with no further traffic, counting lent tokens as spent (a holder's
	// unspent tokens may be returned; the Store's state itself lasts
	// until the loans end).
	Reset time.Duration
	// Lent is what the Store lends the call's lessee after the call: the
	// most it may hold unspent (0 without a Lessee ID). A grant settles it
	// to min(lent, Held) + Granted; for token_bucket and gcra a call that
	// grants nothing settles it to lent − what the call reports spent
	// before the lessee's previous call (see "Lent tokens"); the windows'
	// report it unchanged (0 if the loan expired).
	Lent int64
	// AheadTokens and AheadWindows are fixed_window's windows leased
	// ahead (see Lessee.AheadWindows): the Store lends the call's lessee
	// AheadTokens in each of the AheadWindows windows after the current
	// one, counted in each of them from its start, as if granted by a
	// call at that start; 0 and 0 when it lends none ahead (then the
	// lessee's loan ends with the current window).
	AheadTokens  int64
	AheadWindows int64
	// Crowded says that the call was crowded out (Lessee.MaxHolders): it
	// was made as a call with no Lessee for exactly need tokens, so
	// Granted is need or 0, spent at once (the check that asked is
	// decided by it; nothing is left to hold), and Lent is 0.
	Crowded bool
	// Checked says that a tier between the holder and the Store decided
	// the call as a check: the lease protocol's owner does for a need
	// over what the holder may hold (a rule's gateway_share). The
	// holder's loan was renewed and settled, lending nothing (Lent is the
	// loan after), and need was granted to no holder: Granted is need or
	// 0, spent at once by the check that asked. A Store never sets it.
	Checked bool
}

// Result is the answer of an exact check (sliding_log, concurrency).
type Result struct {
	Allowed    bool
	Remaining  int64
	RetryAfter time.Duration // zero when allowed
	Reset      time.Duration
}

// Lessee is who a lease call lends tokens to, and what it still holds.
type Lessee struct {
	// ID names the holder (a Manager: Config.Holder). Empty: nothing is lent, the granted tokens count as
	// spent at once (a Manager's local failover store, one-off spends).
	ID string
	// Held is the tokens of key that ID still holds unspent when it sends
	// the call (what earlier grants left; an upper bound is fine, the
	// Store then counts some spent tokens as lent until the next call).
	// The Store keeps min(lent, Held) of what it lent to ID before, plus
	// this call's grant.
	Held int64
	// TTL is how long ID's lent tokens stay lent after this call (when
	// tokens are granted): ID must spend them within TTL of sending the
	// call, and the Store counts them as spent after TTL of receiving it.
	// Between 1ms and MaxLeaseTTL when ID is set; token_bucket and gcra
	// only (a window's tokens are lent until the window ends).
	TTL time.Duration
	// SpentBefore is how many of the tokens the Store lent ID as of its
	// previous call of the key ID had spent before sending that call and
	// has not refunded since (at most: 0 when unknown). The Store counts
	// them spent from that call's last spend (its now − Idle, which it
	// keeps with the loan) rather than from this call's: without it, a
	// holder that keeps spending while the Store denies it would see the
	// refill of its earlier spends start anew at every call. token_bucket
	// and gcra only.
	SpentBefore int64
	// Idle is how long before sending the call ID last spent a token of
	// key (at most: round it down; 0 when unknown). The tokens lent to ID
	// that it no longer holds (lent − Held) were spent by then, so the
	// Store lets them refill from then on instead of from this call:
	// without it, a holder that spent its whole loan and went quiet would
	// find the refill of its idle spell withheld. token_bucket and gcra
	// only.
	Idle time.Duration
	// Call tells this call apart from other calls of the key: any value
	// but 0, drawn anew for each call (a Manager draws it at random). The
	// Store keeps the Call of the last call that settled a loan of the
	// key, and what it granted. 0: the call is not told apart.
	// token_bucket and gcra only.
	Call uint32
	// Unanswered is the Call of ID's previous call of the key when that
	// call got no answer (it failed or timed out: the Store may have run
	// it); 0 otherwise. If that call is still the last one to have
	// settled a loan of the key, its grant never reached ID, who cannot
	// spend it: the Store takes it off ID's loan and gives it back to the
	// key before this call, as a return of that much would; the rest of
	// the loan runs on. A grant comes back at most once, and only that
	// call's: if another call settled a loan after it (another holder's,
	// or ID's calls reordered), nothing comes back and the grant counts
	// as spent at this call, as it did before this field. token_bucket
	// and gcra only.
	Unanswered uint32
	// AheadWindows and AheadTokens ask a fixed_window key for tokens of the
	// windows after the current one, so that a holder need not call at
	// every window: AheadTokens in each of the next AheadWindows windows.
	// The Store lends each window's share only as far as the shares it
	// lends other holders ahead leave of the limit, and counts it in each
	// window from that window's start (its count starts at the shares lent
	// into it); the holder may spend a window's share only within that
	// window, and a return ends the loan with every share ahead. A call
	// with AheadWindows 0 (or no ID) ends the shares the holder had
	// ahead after the current window. Other algorithms ignore both.
	AheadWindows int64
	AheadTokens  int64
	// First says that ID was never granted tokens of the key (as far as
	// it knows: a holder that dropped the key and forgot it says so
	// again). A hint, nothing more: what the call does does not depend on
	// it. A Store that can create a key's state more cheaply than it can
	// update it (the Redis store, with SET NX instead of a script) tries
	// that first for such a call, and falls back to its usual call when
	// the key has state.
	First bool
	// MaxHolders bounds the holders of the key: a call of ID, which has
	// no running loan of the key, when MaxHolders holders have one, is
	// crowded out (see "Lent tokens" in the lease package doc): it lends
	// nothing, and is made as a call with no ID for exactly need tokens,
	// so that the check that asked is decided by the Store
	// (Grant.Crowded). A holder with a running loan is never crowded
	// out. 0: no bound; at most MaxKeyHolders. A node sets it for the
	// holders of the lease protocol (a rule's max_holders), which a
	// client controls; its own Managers need none (a key's nodes are
	// few).
	MaxHolders int
}

// MaxKeyHolders bounds Lessee.MaxHolders: a Store call costs time linear
// in the key's loans, and Redis runs nothing else meanwhile.
const MaxKeyHolders = 1024

// MaxAheadWindows bounds Lessee.AheadWindows.
const MaxAheadWindows = 1 << 16

// MaxLeaseTTL bounds Lessee.TTL.
const MaxLeaseTTL = 24 * time.Hour

// MaxHolderLen bounds the length of a Lessee's ID.
const MaxHolderLen = 256
