package rls_test

import (
	"io"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/node/rls"
)

// withMaxConns is a newRig option that sets ServerConfig.MaxConns.
func withMaxConns(n int) func(*rls.ServerConfig) {
	return func(c *rls.ServerConfig) { c.MaxConns = n }
}

// withIdleTimeout is a newRig option that sets ServerConfig.IdleTimeout.
func withIdleTimeout(d time.Duration) func(*rls.ServerConfig) {
	return func(c *rls.ServerConfig) { c.IdleTimeout = d }
}

// TestTransportMaxConns: with MaxConns 2, two connections are served; a
// third one's call gets no answer while they are open (checked once the
// server's accept loop waits for a connection slot instead of in Accept,
// and both have answered calls made after the third connected and sent
// its request), and gets it once one of them closes.
func TestTransportMaxConns(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr rls.Transport) {
		r := newRig(t, transportYAML, withTransport(tr), withMaxConns(2))
		c1 := dialH2(t, r.addr)
		c1.call(1, "a", 1)
		c2 := dialH2(t, r.addr)
		c2.call(1, "b", 2)

		// The third connection: made (it waits in the listener's backlog),
		// its call sent from a goroutine of its own.
		c3, answered := callInBacklog(t, r.addr)
		waitForSlot(t)
		c1.call(3, "d", 4)
		c2.call(3, "e", 5)
		select {
		case err := <-answered:
			t.Fatalf("the third connection was served while two were open (read error %v)", err)
		default:
		}

		c1.conn.Close()
		select {
		case err := <-answered:
			if err != nil {
				t.Fatalf("the third connection, once the first closed: %v", err)
			}
		case <-time.After(hangGuard): // a hang guard only
			t.Fatal("the third connection was not served once the first closed")
		}
		checkRLS(t, c3.stream(1), 3)
		c2.call(5, "f", 6)
	})
}

// TestTransportIdleTimeout: a connection with no call for IdleTimeout gets
// GOAWAY(NO_ERROR) and is closed, whether it made calls or none; a
// connection whose call is in flight gets no GOAWAY however long the call
// takes (checked once a connection opened after the call began has been
// closed as idle), answers the call, then is closed as idle in turn.
func TestTransportIdleTimeout(t *testing.T) {
	const idle = 200 * time.Millisecond
	checkGoAway := func(t *testing.T, c *h2client, what string) {
		t.Helper()
		c.readToEnd()
		if len(c.goaways) == 0 {
			t.Fatalf("%s: closed without a GOAWAY", what)
		}
		if g := c.goaways[len(c.goaways)-1]; g.code != http2.ErrCodeNo {
			t.Errorf("%s: GOAWAY %v, want NO_ERROR", what, g.code)
		}
	}
	eachTransport(t, func(t *testing.T, tr rls.Transport) {
		t.Run("idle", func(t *testing.T) {
			r := newRig(t, transportYAML, withTransport(tr), withIdleTimeout(idle))
			used := dialH2(t, r.addr)
			used.call(1, "a", 1)
			unused := dialH2(t, r.addr)
			checkGoAway(t, used, "a connection after its call")
			if g := used.goaways[len(used.goaways)-1]; g.lastStreamID != 1 {
				t.Errorf("GOAWAY's last stream %d, want 1", g.lastStreamID)
			}
			checkGoAway(t, unused, "a connection without a call")
			dialH2(t, r.addr).call(1, "b", 2) // new connections are served
		})
		t.Run("call in flight", func(t *testing.T) {
			g, gate := withGate(t)
			r := newRig(t, transportYAML, withTransport(tr), withIdleTimeout(idle), gate)
			t.Cleanup(g.open)
			busy := dialH2(t, r.addr)
			busy.send(1, pathRLS, grpcMsg(t, rlsReq("a", 1)), shape{})
			g.waitEntered(t)
			// Idle for the timeout after the call began, and closed.
			checkGoAway(t, dialH2(t, r.addr), "an idle connection")
			busy.ping([8]byte{1}) // what the server sent before the PING is read
			if len(busy.goaways) > 0 {
				t.Fatalf("GOAWAY %v on a connection with a call in flight", busy.goaways)
			}
			g.open()
			busy.readUntil("the answer", func() bool { return busy.stream(1).ended || busy.stream(1).rst })
			checkRLS(t, busy.stream(1), 1)
			checkGoAway(t, busy, "the connection once its call is answered")
		})
	})
}

// waitForSlot waits for the server's accept loop to wait for a connection
// slot (MaxConns reached): grpc-go's in netutil.LimitListener's Accept,
// lean's in its own select. Without a limit, it waits in the listener's
// Accept and this fails at the hang guard.
func waitForSlot(t *testing.T) {
	t.Helper()
	// The accept loop parks on its own; nothing signals it.
	clocktest.EventuallyState(t, hangGuard, "the accept loop to wait for a connection slot", func() (bool, string) {
		var loops []string
		for _, g := range serverGoroutines() {
			first, _, _ := strings.Cut(g, "\n")
			switch {
			case strings.Contains(g, "netutil.(*limitListener).acquire("),
				strings.Contains(first, "[select") && strings.Contains(g, "rls.(*leanServer).serve("):
				return true, ""
			case strings.Contains(g, "rls.(*leanServer).serve("), strings.Contains(g, "grpc.(*Server).Serve("):
				loops = append(loops, g)
			}
		}
		return false, "the accept loops:\n" + strings.Join(loops, "\n\n")
	})
}

// callInBacklog connects to addr (a connection the server may not serve
// yet) and makes a ShouldRateLimit call of hits 3 on stream 1 from a
// goroutine of its own, which sends the call's result on answered.
func callInBacklog(t *testing.T, addr string) (c *h2client, answered <-chan error) {
	c = dialRaw(t, addr)
	c.mute = true // read's answers to the server must not fail the test off its goroutine
	msg := grpcMsg(t, rlsReq("c", 3))
	sent := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := io.WriteString(c.conn, http2.ClientPreface)
		if err == nil {
			err = c.fr.WriteSettings()
		}
		if err == nil {
			c.send(1, pathRLS, msg, shape{})
		}
		close(sent)
		for err == nil && !c.stream(1).ended && !c.stream(1).rst {
			_, err = c.read()
		}
		done <- err
	}()
	<-sent
	return c, done
}
