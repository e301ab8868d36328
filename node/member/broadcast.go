package member

import (
	"errors"
	"fmt"
	"slices"

	"github.com/hashicorp/memberlist"
)

// MaxMessageSize is the largest message Broadcast accepts: a user message
// must fit, with memberlist's framing and encryption, in one gossip packet
// (memberlist's 1400-byte UDP buffer).
const MaxMessageSize = 1200

// maxQueuedBroadcasts bounds the broadcasts waiting to be gossiped; the
// oldest are dropped beyond it.
const maxQueuedBroadcasts = 1024

// ErrMessageTooLarge means a Broadcast message exceeds MaxMessageSize.
var ErrMessageTooLarge = errors.New("broadcast message too large")

// Broadcast gossips msg to every other member (not to this node), piggy
// backed on memberlist's gossip with retransmits that scale with the
// cluster size. Delivery is best effort: a member that joins later or is
// partitioned away for long may miss it. Receivers get it through
// Config.OnMessage. msg is copied.
func (c *Cluster) Broadcast(msg []byte) error {
	if len(msg) > MaxMessageSize {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrMessageTooLarge, len(msg), MaxMessageSize)
	}
	if c.closed() {
		return ErrClosed
	}
	c.queue.QueueBroadcast(broadcast(slices.Clone(msg)))
	if c.queue.NumQueued() > maxQueuedBroadcasts {
		c.queue.Prune(maxQueuedBroadcasts)
	}
	return nil
}

// DroppedMessages returns how many received broadcasts were dropped because
// OnMessage fell more than Config.MessageQueue behind.
func (c *Cluster) DroppedMessages() uint64 { return c.dropped.Load() }

// runMessages delivers received broadcasts to OnMessage, serially.
func (c *Cluster) runMessages() {
	defer c.wg.Done()
	for {
		select {
		case <-c.stop:
			return
		case m := <-c.msgs:
			if c.cfg.OnMessage != nil {
				c.cfg.OnMessage(m)
			}
		}
	}
}

// broadcast is one user message in the TransmitLimitedQueue; messages never
// invalidate one another.
type broadcast []byte

func (b broadcast) Invalidates(memberlist.Broadcast) bool { return false }
func (b broadcast) Message() []byte                       { return b }
func (b broadcast) Finished()                             {}

func (d *delegate) NotifyMsg(b []byte) {
	if d.cfg.OnMessage == nil || len(b) == 0 {
		return
	}
	select {
	case d.msgs <- slices.Clone(b):
	default:
		d.dropped.Add(1)
	}
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.queue.GetBroadcasts(overhead, limit)
}
