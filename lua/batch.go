package lua

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/lease"
)

// Batching: concurrent Lease and Return calls share one script call.
//
// A call goes out at once, alone and as its own script (exactly as without
// batching), when no call of its group is in flight. Calls that arrive
// while one is in flight wait in the group's queue, and when it ends, the
// queue (at most Config.MaxBatch calls) goes out as one EVALSHA of the
// batch script, which runs each call's own script on its own key, in
// order, and returns each one's reply. No timer: a batch waits for
// nothing but the call in flight before it, and a queue that reaches
// MaxBatch goes out at once. A group is the whole server for a standalone
// or Sentinel Redis (a script may touch any keys there); on a Cluster it
// is one hash slot, since a script's keys must share one (a counter's key
// is its own hash tag, so different counters rarely share a slot, and
// batches there are mostly of one).

// bodyIndex is the index of a leased algorithm's lease or return script in
// the batch script.
func bodyIndex(a lease.Algorithm, isLease bool) int {
	i := 2 * int(a)
	if isLease {
		return i
	}
	return i + 1
}

// newBatchScript wraps every leased algorithm's lease and return script
// (each the source newScripts builds: prelude, leased.lua, the algorithm's
// file) in a function of its own, and runs them for each key in turn:
//
//	KEYS  one key per call (a key may come twice)
//	ARGV  per call: the index of its script (bodyIndex), the number of its
//	      arguments n, then its n arguments
//	returns one reply per call: what its script returned, or the error it
//	      raised (an error reply in the array: a call that fails fails
//	      alone, and the calls after it still run, as they would have as
//	      calls of their own)
//
// Each function gets its call's key as KEYS[1] and its arguments as
// ARGV[1..n], which is all a script reads; each reads Redis TIME itself,
// as it does alone (one TIME for the whole batch would save about 2% of a
// call's work, and give its calls one instant). Lua's pcall catches what redis.call raises (a
// WRONGTYPE, an OOM) and runtime errors; a script killed with SCRIPT KILL
// still stops the whole call (Redis raises the kill again at every line).
func newBatchScript() *rueidis.Lua { return rueidis.NewLuaScript(batchSource()) }

// batchSource is the batch script's source (see newBatchScript).
func batchSource() string {
	var b strings.Builder
	b.WriteString("-- batch: runs the lease and return scripts of several keys in one call\n")
	b.WriteString("local bodies = {}\n")
	body := func(i int, name string) {
		// The newline before end: a script may end in a comment.
		fmt.Fprintf(&b, "bodies[%d] = function(KEYS, ARGV)\n%s\nend\n", i, scriptSource(name, true, true))
	}
	for a, f := range algorithms {
		if f.lease != "" {
			body(bodyIndex(lease.Algorithm(a), true), f.lease)
			body(bodyIndex(lease.Algorithm(a), false), f.ret)
		}
	}
	b.WriteString(`local out, a = {}, 1
for i = 1, #KEYS do
  local f, n = bodies[tonumber(ARGV[a])], tonumber(ARGV[a + 1])
  local args = {}
  for j = 1, n do args[j] = ARGV[a + 1 + j] end
  a = a + 2 + n
  local ok, r = pcall(f, {KEYS[i]}, args)
  if not ok then
    if type(r) == 'table' and r.err then
      out[i] = r
    else
      out[i] = {err = tostring(r)}
    end
  elseif r == nil then
    out[i] = false
  else
    out[i] = r
  end
end
return out
`)
	return b.String()
}

// call is one Lease or Return on its way to Redis.
type call struct {
	op     string // "lease" or "return", for errors
	single *rueidis.Lua
	body   int // bodyIndex of its script in the batch script
	key    string
	args   []string
	ctx    context.Context // the caller's, with the call timeout applied

	done  chan struct{} // closed once reply and err are set
	reply rueidis.RedisMessage
	err   error
}

// batcher coalesces calls into batches, per group (see the top of this
// file).
type batcher struct {
	client  rueidis.Client
	script  *rueidis.Lua
	max     int
	cluster bool

	mu     sync.Mutex
	groups map[uint16]*group

	// queued, when set (by tests only), is called with each call that joins
	// a group's queue and the queue's length then, under the batcher's
	// lock.
	queued func(c *call, n int)
	// sending, when set (by tests only), is called with the calls of each
	// script call just before it is sent; it may block, holding that call
	// in flight.
	sending func(calls []*call)
}

// group is a group's state: the batches in flight and the calls waiting
// for the next one.
type group struct {
	inflight int
	queue    []*call
}

func newBatcher(client rueidis.Client, script *rueidis.Lua, max int) *batcher {
	return &batcher{
		client:  client,
		script:  script,
		max:     max,
		cluster: client.Mode() == rueidis.ClientModeCluster,
		groups:  map[uint16]*group{},
	}
}

// do runs c, alone or in a batch, and returns its reply. It returns when
// the reply is in or c.ctx is done, whichever comes first.
func (b *batcher) do(c *call) (rueidis.RedisMessage, error) {
	var slot uint16
	if b.cluster {
		slot = keySlot(c.key)
	}
	c.done = make(chan struct{})
	b.mu.Lock()
	g := b.groups[slot]
	if g == nil {
		g = &group{}
		b.groups[slot] = g
	}
	if g.inflight == 0 {
		// Nothing in flight: c goes now, in this goroutine, with its own
		// context, as a call of its own.
		g.inflight++
		b.mu.Unlock()
		b.send(slot, []*call{c})
		return c.reply, c.err
	}
	g.queue = append(g.queue, c)
	if b.queued != nil {
		b.queued(c, len(g.queue))
	}
	var full []*call
	if len(g.queue) >= b.max {
		full, g.queue = g.queue, nil
		g.inflight++
	}
	b.mu.Unlock()
	if full != nil {
		go b.send(slot, full)
	}
	select {
	case <-c.done:
		return c.reply, c.err
	case <-c.ctx.Done():
		// Its batch may still run it: the answer is lost, as a single
		// call's is when its deadline passes first.
		return rueidis.RedisMessage{}, unavailable(c.op, c.ctx.Err())
	}
}

// send runs calls as one script call, then sends the group's queue, if
// any, as the next batch (in a goroutine of its own: send's caller may be
// waiting for its own reply).
func (b *batcher) send(slot uint16, calls []*call) {
	b.exec(calls)
	b.mu.Lock()
	g := b.groups[slot]
	if len(g.queue) == 0 {
		g.inflight--
		if g.inflight == 0 {
			delete(b.groups, slot)
		}
		b.mu.Unlock()
		return
	}
	var next []*call
	if len(g.queue) <= b.max {
		next, g.queue = g.queue, nil
	} else {
		next = append([]*call(nil), g.queue[:b.max]...)
		g.queue = append(g.queue[:0:0], g.queue[b.max:]...)
	}
	b.mu.Unlock()
	go b.send(slot, next)
}

// exec sends calls (those whose callers still wait) as one script call and
// sets every call's reply.
func (b *batcher) exec(calls []*call) {
	live := calls[:0:0]
	for _, c := range calls {
		if err := c.ctx.Err(); err != nil {
			c.err = unavailable(c.op, err)
			close(c.done)
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	if b.sending != nil {
		b.sending(live)
	}
	if len(live) == 1 {
		c := live[0]
		c.reply, c.err = c.single.Exec(c.ctx, b.client, []string{c.key}, c.args).ToMessage()
		if c.err != nil {
			c.err = unavailable(c.op, c.err)
		}
		close(c.done)
		return
	}
	ctx, cancel := batchContext(live)
	defer cancel()
	keys := make([]string, len(live))
	n := 0
	for _, c := range live {
		n += 2 + len(c.args)
	}
	args := make([]string, 0, n)
	for i, c := range live {
		keys[i] = c.key
		args = append(args, itoa(int64(c.body)), itoa(int64(len(c.args))))
		args = append(args, c.args...)
	}
	replies, err := b.script.Exec(ctx, b.client, keys, args).ToArray()
	if err == nil && len(replies) != len(live) {
		err = fmt.Errorf("batch script returned %d replies for %d calls", len(replies), len(live))
	}
	for i, c := range live {
		if err != nil {
			c.err = unavailable(c.op, err)
		} else if c.err = replies[i].Error(); c.err != nil {
			c.err = unavailable(c.op, c.err)
		} else {
			c.reply = replies[i]
		}
		close(c.done)
	}
}

// batchContext bounds a batch by the latest deadline of its callers' (each
// caller stops waiting at its own), or by none if one has none. It is not
// canceled with any caller's context: the others still wait.
func batchContext(calls []*call) (context.Context, context.CancelFunc) {
	var last time.Time
	for _, c := range calls {
		d, ok := c.ctx.Deadline()
		if !ok {
			return context.Background(), func() {}
		}
		if d.After(last) {
			last = d
		}
	}
	return context.WithDeadline(context.Background(), last)
}

// keySlot is the Redis Cluster slot of a key: CRC-16/XMODEM of its hash
// tag (the content of the first {...}, if not empty; else the whole key)
// mod 16384.
func keySlot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc & 16383
}
