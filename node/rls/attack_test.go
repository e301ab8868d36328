package rls_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/sluicehq/sluice/node/rls"
)

// The attacks on the transports an HTTP/2 attack probe found, each run
// against both transports: the property a fix must hold is asserted with
// counts, bytes and events (a connection cut off, a stream reset, a gauge),
// never with latencies. The CPU per attack frame is measured by
// BenchmarkAttackFrame and BenchmarkLeanFlowFrame.

// withRequestTimeout and withMaxPending are newRig options.
func withRequestTimeout(d time.Duration) func(*rls.ServerConfig) {
	return func(c *rls.ServerConfig) { c.RequestTimeout = d }
}

func withMaxPending(n int64) func(*rls.ServerConfig) {
	return func(c *rls.ServerConfig) { c.MaxPendingBytes = n }
}

// metric is the value of series in r's metrics (0 when absent).
func (r *rig) metric(t testing.TB, series string) float64 {
	t.Helper()
	var b bytes.Buffer
	r.node.MetricsSet().WritePrometheus(&b)
	for _, line := range strings.Split(b.String(), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", series, err)
			}
			return f
		}
	}
	return 0
}

const pendingBytes = "sluice_rls_pending_bytes"

// servedOn reports whether c's connection is still served: a PING answered
// (true), or the connection ended first (false, every frame read).
func servedOn(c *h2client) bool {
	c.mute = true
	c.check(c.fr.WritePing(false, [8]byte{'s', 'e', 'r', 'v', 'e', 'd'}))
	for {
		if _, err := c.read(); err != nil {
			return false
		}
		for _, d := range c.pingAcks {
			if d == [8]byte{'s', 'e', 'r', 'v', 'e', 'd'} {
				return true
			}
		}
	}
}

// cutOff checks that the server has ended c for too many SETTINGS: no
// PING answered, at most maxSettings (64) SETTINGS parameters acknowledged
// (each frame here has one), and any GOAWAY says ENHANCE_YOUR_CALM.
func cutOff(t *testing.T, c *h2client, what string) {
	t.Helper()
	if servedOn(c) {
		t.Fatalf("%s: the connection is still served", what)
	}
	if c.settingsAcks > 64 {
		t.Errorf("%s: %d SETTINGS acknowledged", what, c.settingsAcks)
	}
	for _, g := range c.goaways {
		if g.code != http2.ErrCodeEnhanceYourCalm {
			t.Errorf("%s: GOAWAY %v, want ENHANCE_YOUR_CALM", what, g.code)
		}
	}
}

// TestAttackSettingsFlood: a connection may send 64 SETTINGS parameters
// between two requests it sends whole. Past them it is cut off: one
// SETTINGS frame of 2730 parameters; SETTINGS of one parameter
// interleaved with new streams that never finish (lean's count of
// SETTINGS frames used to start over at every new stream, and each of
// its SETTINGS_INITIAL_WINDOW_SIZE walked every stream; grpc-go queues
// every SETTINGS for its writer, 10000 of them, and walks its streams for
// each larger initial window). A client that changes its settings between
// its calls is served.
func TestAttackSettingsFlood(t *testing.T) {
	iws := func(v uint32) http2.Setting { return http2.Setting{ID: http2.SettingInitialWindowSize, Val: v} }
	eachTransport(t, func(t *testing.T, tr rls.Transport) {
		r := newRig(t, transportYAML, withTransport(tr))
		t.Run("one frame", func(t *testing.T) {
			c := dialH2(t, r.addr)
			flood := make([]http2.Setting, maxFrame/6)
			for i := range flood {
				flood[i] = iws(65535 + uint32(i%2))
			}
			c.mute = true
			c.check(c.fr.WriteSettings(flood...))
			cutOff(t, c, "a SETTINGS frame of 2730 parameters")
			if c.settingsAcks > 1 {
				t.Errorf("the flood was acknowledged")
			}
		})
		t.Run("between streams", func(t *testing.T) {
			c := dialH2(t, r.addr)
			c.mute = true
			id := uint32(1)
			for i := range 5000 {
				if c.fr.WriteSettings(iws(65535+uint32(i%2))) != nil {
					break
				}
				if i%8 == 0 {
					c.check(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.headerBlock(pathRLS), EndHeaders: true}))
					id += 2
				}
			}
			cutOff(t, c, "5000 SETTINGS between streams that never finish")
		})
		t.Run("between calls", func(t *testing.T) {
			c := dialH2(t, r.addr)
			for i := range 200 {
				c.check(c.fr.WriteSettings(iws(65535+uint32(i%2)), http2.Setting{ID: http2.SettingMaxFrameSize, Val: maxFrame}))
				c.call(uint32(2*i+1), "calls"+strconv.Itoa(i), 1)
			}
		})
	})
}

// attackMsg is the start of a gRPC message that announces size bytes and
// brings n of them.
func attackMsg(size, n int) []byte {
	return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(size)), make([]byte, n-5)...)
}

// heapInUse is the live heap and the goroutines' stacks, after a
// collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc + m.StackInuse
}

// TestAttackUnfinishedRequests: requests left unfinished on 8 connections,
// 48 each of 64 KiB (24 MiB in all), hold no more than the server's budget
// (1 MiB here) past what each connection may hold of its own (16 KiB):
// past it, lean refuses new ones (REFUSED_STREAM), grpc closes the
// connection; the pending-bytes gauge never passes the bound, the heap
// grows by no more than 8 MiB over it (it grew by the whole attack: lean
// kept up to its 4 MiB window per connection, grpc-go without bound), and
// a legitimate caller's calls are answered all along. Once RequestTimeout
// has passed, every unfinished request is reset and the gauge is back to
// 0.
func TestAttackUnfinishedRequests(t *testing.T) {
	const (
		budget  = 1 << 20
		conns   = 8
		streams = 48
		size    = 64 << 10
		timeout = 10 * time.Second
	)
	eachTransport(t, func(t *testing.T, tr rls.Transport) {
		r := newRig(t, transportYAML, withTransport(tr), withMaxPending(budget), withRequestTimeout(timeout))
		legit := dialH2(t, r.addr)
		legit.call(1, "warm", 1)
		before := heapInUse()
		msg := attackMsg(200<<10, size)
		var attackers []*h2client
		legitID := uint32(3)
		cut := 0
		for i := range conns {
			c := dialH2(t, r.addr)
			c.mute = true
			alive := true
			for s := 0; s < streams && alive; s++ {
				id := uint32(2*s + 1)
				c.check(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.headerBlock(pathRLS), EndHeaders: true}))
				c.stream(id)
				alive = c.sendData(id, msg, false)
			}
			if alive && servedOn(c) {
				attackers = append(attackers, c)
			} else {
				cut++ // the connection, closed
			}
			if g := r.metric(t, pendingBytes); g > budget {
				t.Fatalf("%s: %.0f bytes, past the budget of %d", pendingBytes, g, budget)
			}
			legit.call(legitID, "legit"+strconv.Itoa(i), 1)
			legitID += 2
		}
		grown := int64(heapInUse()) - int64(before)
		t.Logf("%d requests of %d KiB left unfinished: the heap and stacks grew by %.1f MiB, %s %.0f, %d of %d connections closed",
			conns*streams, size>>10, float64(grown)/(1<<20), pendingBytes, r.metric(t, pendingBytes), conns-len(attackers), conns)
		if grown > 2*budget+8<<20 {
			t.Errorf("the heap grew by %d bytes with a budget of %d", grown, budget)
		}
		for _, c := range attackers {
			for _, s := range c.streams {
				if s.rst || s.ended {
					cut++ // a request, refused
				}
			}
		}
		if cut == 0 {
			t.Errorf("no unfinished request was refused, and no connection closed")
		}
		r.clock.Advance(timeout)
		for _, c := range attackers {
			c.readUntil("every unfinished request reset", func() bool {
				for _, s := range c.streams {
					if !s.rst && !s.ended {
						return false
					}
				}
				return true
			})
		}
		if g := r.metric(t, pendingBytes); g != 0 {
			t.Errorf("%s %.0f once every unfinished request is reset", pendingBytes, g)
		}
		legit.call(legitID, "after", 1)
	})
}

// TestAttackStalledRequest: a request left unfinished is reset once
// RequestTimeout has passed on the server's clock (not before), with an
// error status, and its bytes freed; the connection serves on.
func TestAttackStalledRequest(t *testing.T) {
	const timeout = 5 * time.Second
	eachTransport(t, func(t *testing.T, tr rls.Transport) {
		r := newRig(t, transportYAML, withTransport(tr), withRequestTimeout(timeout))
		c := dialH2(t, r.addr)
		// 20 KiB: past what lean lets a connection hold without drawing on
		// the server's budget, which the gauge counts.
		c.send(1, pathRLS, attackMsg(100<<10, 20<<10), shape{dataFrames: 2, open: true})
		c.ping([8]byte{1})
		if g := r.metric(t, pendingBytes); g <= 0 {
			t.Errorf("%s %.0f with a request unfinished", pendingBytes, g)
		}
		r.clock.Advance(timeout - time.Millisecond)
		c.ping([8]byte{2})
		if s := c.stream(1); s.rst || s.ended {
			t.Fatalf("reset before its deadline")
		}
		r.clock.Advance(time.Millisecond)
		c.readUntil("the stalled request reset", func() bool { return c.stream(1).rst || c.stream(1).ended })
		if s := c.stream(1); !s.rst && s.grpcStatus() == "0" {
			t.Errorf("answered OK")
		} else {
			t.Logf("reset: RST_STREAM %v %v, grpc-status %s", s.rst, s.rstCode, s.grpcStatus())
		}
		if g := r.metric(t, pendingBytes); g != 0 {
			t.Errorf("%s %.0f once the request is reset", pendingBytes, g)
		}
		if n := r.metric(t, `sluice_rls_unfinished_reset_total{reason="timeout"}`); n != 1 {
			t.Errorf("%.0f requests reset for their deadline, want 1", n)
		}
		c.call(3, "after", 1)
	})
}

// TestAttackIdleUnfinished: a request that never finishes keeps no
// connection: with MaxConns 2 taken by two connections, each with an
// unfinished request and nothing else, a third waits; once RequestTimeout
// passes their requests are reset, they are closed as idle, and the third
// is served. A connection that opens a new unfinished request from time
// to time is idle all the same (lean: GOAWAY; grpc: closed when it opens
// one past the idle timeout).
func TestAttackIdleUnfinished(t *testing.T) {
	const idle = 200 * time.Millisecond
	const timeout = 5 * time.Second
	open := func(c *h2client, id uint32) {
		c.send(id, pathRLS, grpcMsg(c.t, rlsReq("held", 1))[:7], shape{open: true})
	}
	eachTransport(t, func(t *testing.T, tr rls.Transport) {
		t.Run("max conns", func(t *testing.T) {
			r := newRig(t, transportYAML, withTransport(tr), withMaxConns(2), withIdleTimeout(idle), withRequestTimeout(timeout))
			c1, c2 := dialH2(t, r.addr), dialH2(t, r.addr)
			open(c1, 1)
			open(c2, 1)
			c1.ping([8]byte{1})
			c2.ping([8]byte{1})
			c3, answered := callInBacklog(t, r.addr)
			waitForSlot(t)
			select {
			case err := <-answered:
				t.Fatalf("a third connection was served with two open (%v)", err)
			default:
			}
			r.clock.Advance(timeout)
			c1.readToEnd() // reset, then closed as idle
			c2.readToEnd()
			select {
			case err := <-answered:
				if err != nil {
					t.Fatalf("the third connection: %v", err)
				}
			case <-time.After(hangGuard): // a hang guard only
				t.Fatal("the third connection was not served once the others were closed")
			}
			checkRLS(t, c3.stream(1), 3)
		})
		t.Run("a request at a time", func(t *testing.T) {
			r := newRig(t, transportYAML, withTransport(tr), withIdleTimeout(idle), withRequestTimeout(timeout))
			a := dialH2(t, r.addr)
			open(a, 1)
			a.ping([8]byte{1})
			b := dialH2(t, r.addr)
			b.readToEnd() // closed as idle: a has had no request whole for longer
			a.mute = true
			open(a, 3)
			// GOAWAY (lean's idle timer), or closed (grpc, at the new
			// request); not a deadline: its requests are still unfinished.
			for len(a.goaways) == 0 {
				if _, err := a.read(); err != nil {
					if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
						t.Fatal("a connection with nothing but unfinished requests for the idle timeout is served on")
					}
					break
				}
			}
			r.clock.Advance(timeout)
			a.readToEnd()
			for _, g := range a.goaways {
				if g.code != http2.ErrCodeNo {
					t.Errorf("GOAWAY %v, want NO_ERROR", g.code)
				}
			}
		})
	})
}

// TestTransportBlockedReplies: 1000 answers held back by a stream window
// of 0 (SETTINGS_INITIAL_WINDOW_SIZE 0) take none of the window meant for
// the connection, and go out as their windows open: a WINDOW_UPDATE on
// one stream lets that stream alone send, a SETTINGS_INITIAL_WINDOW_SIZE
// of 1 lets each send one byte and no more, a larger one lets all finish,
// each answer
// whole and right. (grpc-go lets only some of them send their byte.)
func TestTransportBlockedReplies(t *testing.T) {
	const n = 1000
	eachTransport(t, func(t *testing.T, tr rls.Transport) {
		r := newRig(t, transportYAML, withTransport(tr))
		c := dialH2(t, r.addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		c.manualFlow = true
		c.readUntil("the SETTINGS ACK", func() bool { return c.settingsAcks > 0 })
		c.check(c.fr.WriteWindowUpdate(0, 1<<30))
		for i := range n {
			c.send(uint32(2*i+1), pathRLS, grpcMsg(t, rlsReq("b"+strconv.Itoa(i), 1+i%100)), shape{})
		}
		c.readStreams("every answer's headers", n, func(s *h2stream) bool { return len(s.blocks) > 0 })
		for range 2 * n {
			c.check(c.fr.WriteWindowUpdate(0, 1))
		}
		c.ping([8]byte{1})
		data := func() (frames, bytes int) {
			for _, f := range c.log {
				if f.typ == http2.FrameData {
					frames++
					bytes += int(f.length)
				}
			}
			return frames, bytes
		}
		if f, _ := data(); f != 0 {
			t.Fatalf("%d DATA frames with every stream window at 0", f)
		}
		c.check(c.fr.WriteWindowUpdate(7, 3))
		c.readUntil("stream 7's 3 bytes", func() bool { return len(c.stream(7).data) == 3 })
		c.ping([8]byte{2})
		if f, b := data(); f != 1 || b != 3 {
			t.Fatalf("%d DATA frames, %d bytes, after a WINDOW_UPDATE of 3 on one stream", f, b)
		}
		c.check(c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1}))
		c.readUntil("the SETTINGS ACK", func() bool { return c.settingsAcks == 2 })
		c.ping([8]byte{3})
		sent := 0
		for i := range n {
			id := uint32(2*i + 1)
			want := map[bool]int{true: 4, false: 1}[id == 7]
			switch got := len(c.stream(id).data); {
			case got > want:
				t.Fatalf("stream %d: %d bytes of DATA, past its window of %d", id, got, want)
			case got == want:
				sent++
			}
		}
		// lean sends them before it reads the PING; grpc-go sends some
		// (three quarters or so) and the rest once a larger window comes.
		t.Logf("%d of %d streams sent the byte their window of 1 lets", sent, n)
		if tr == rls.TransportLean && sent != n {
			t.Fatalf("%d of %d streams sent the byte their window of 1 lets", sent, n)
		}
		c.check(c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20}))
		c.readStreams("every answer", n, answered)
		for i := range n {
			checkRLS(t, c.stream(uint32(2*i+1)), 1+i%100)
		}
	})
}

// BenchmarkAttackFrame: the server's time per attack frame on one
// connection with 900 answers held back (stream windows 0): WINDOW_UPDATEs
// of 1 on the connection, all written in one go; or SETTINGS of one
// SETTINGS_INITIAL_WINDOW_SIZE, 60 at a time followed by a request sent
// whole, whose answer the client waits for (a round trip per 60 frames):
// the most a connection may send between two requests (64 parameters, 4
// raises of the window), so 1, 0, 1, 0, 1, 0, 1, then 0 (the first raise
// lets every held-back answer send a byte; the others let none). A PING's
// answer says the server has read them all; ns/op is per attack frame,
// and cpu-ns/frame the process's CPU time per frame (server and client, in
// one process: the client's part is small), which a loaded machine's
// waits do not inflate.
func BenchmarkAttackFrame(b *testing.B) {
	const n = 900
	for _, tr := range transports {
		for _, kind := range []string{"window_update", "settings"} {
			b.Run(fmt.Sprintf("%s/%s", tr, kind), func(b *testing.B) {
				r := newRig(b, transportYAML, withTransport(tr), withMaxPending(-1))
				c := dialH2(b, r.addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
				c.manualFlow = true
				c.check(c.fr.WriteWindowUpdate(0, 1<<30))
				for i := range n {
					c.send(uint32(2*i+1), pathRLS, grpcMsg(b, rlsReq("b"+strconv.Itoa(i), 1)), shape{})
				}
				c.readStreams("every answer's headers", n, func(s *h2stream) bool { return len(s.blocks) > 0 })
				var frames bytes.Buffer
				fr := http2.NewFramer(&frames, nil)
				write := func() {
					if _, err := c.conn.Write(frames.Bytes()); err != nil {
						b.Fatal(err)
					}
					frames.Reset()
				}
				msg := grpcMsg(b, rlsReq("reset", 1))
				id := uint32(2*n + 1)
				cpu := selfCPU(b)
				b.ResetTimer()
				for i := range b.N {
					if kind == "window_update" {
						fr.WriteWindowUpdate(0, 1)
						continue
					}
					v := uint32(0)
					if j := i % 60; j < 8 && j%2 == 0 {
						v = 1
					}
					fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: v})
					if i%60 == 59 || i == b.N-1 {
						// A request whole, its stream's window of its own.
						fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.headerBlock(pathRLS), EndHeaders: true})
						fr.WriteData(id, true, msg)
						fr.WriteWindowUpdate(id, 1<<20)
						write()
						c.readUntil("the answer", func() bool { return c.stream(id).ended || c.stream(id).rst })
						id += 2
					}
				}
				write()
				if !servedOn(c) {
					b.Fatalf("cut off: GOAWAY %v", c.goaways)
				}
				b.StopTimer()
				b.ReportMetric(float64(selfCPU(b)-cpu)/float64(b.N), "cpu-ns/frame")
			})
		}
	}
}
