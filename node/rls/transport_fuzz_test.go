package rls_test

import (
	"bytes"
	"encoding/binary"
	"net"
	"strconv"
	"sync/atomic"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/node/rls"
)

// FuzzTransportFrames writes the input raw to a connection, after a valid
// preface and SETTINGS, then closes the connection's write side: the
// server must not panic, must close the connection (read until then, with
// the hang guard's deadline on the client's side only), and must answer a
// call on a fresh connection afterwards.
func FuzzTransportFrames(f *testing.F) {
	for _, seed := range transportFuzzSeeds(f) {
		f.Add(seed)
	}
	rigs := map[rls.Transport]*rig{}
	for _, tr := range transports {
		rigs[tr] = newRig(f, transportYAML, withTransport(tr))
	}
	var calls atomic.Int64
	f.Fuzz(func(t *testing.T, in []byte) {
		in = in[:min(len(in), 1<<16)] // what the socket buffers hold
		for _, tr := range transports {
			r := rigs[tr]
			c := dialH2(t, r.addr)
			c.mute = true    // the write side is closed below
			c.conn.Write(in) // the server may close before reading it all
			c.conn.(*net.TCPConn).CloseWrite()
			c.readToEnd()
			fresh := dialH2(t, r.addr)
			fresh.call(1, "fuzz"+strconv.FormatInt(calls.Add(1), 10), 1)
			fresh.conn.Close()
		}
	})
}

// transportFuzzSeeds are frame sequences, valid and not.
func transportFuzzSeeds(tb testing.TB) [][]byte {
	type framer struct {
		*http2.Framer
		buf  *bytes.Buffer
		hbuf bytes.Buffer
		henc *hpack.Encoder
	}
	seq := func(write func(fr *framer)) []byte {
		var buf bytes.Buffer
		fr := &framer{Framer: http2.NewFramer(&buf, nil), buf: &buf}
		fr.AllowIllegalWrites = true
		fr.henc = hpack.NewEncoder(&fr.hbuf)
		write(fr)
		return buf.Bytes()
	}
	block := func(fr *framer, path string) []byte {
		fr.hbuf.Reset()
		for _, h := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", path},
			{":authority", "rls.test"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
			fr.henc.WriteField(hpack.HeaderField{Name: h[0], Value: h[1]})
		}
		return bytes.Clone(fr.hbuf.Bytes())
	}
	msg := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			tb.Fatal(err)
		}
		return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(b))), b...)
	}
	request := msg(rlsReq("seed", 1))
	return [][]byte{
		// A call, a health check.
		seq(func(fr *framer) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(fr, pathRLS), EndHeaders: true})
			fr.WriteData(1, true, request)
		}),
		seq(func(fr *framer) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(fr, pathHealth), EndHeaders: true})
			fr.WriteData(1, true, msg(&healthpb.HealthCheckRequest{}))
		}),
		// Two calls, CONTINUATION, padding, PRIORITY, an unknown frame.
		seq(func(fr *framer) {
			b := block(fr, pathRLS)
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:4], PadLength: 3})
			fr.WriteContinuation(1, true, b[4:])
			fr.WritePriority(1, http2.PriorityParam{Weight: 9})
			fr.WriteRawFrame(0xb0, 0, 1, []byte("x"))
			fr.WriteDataPadded(1, false, request[:3], make([]byte, 8))
			fr.WriteData(1, true, request[3:])
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block(fr, pathRLS), EndHeaders: true})
			fr.WriteData(3, true, request)
		}),
		// Control frames.
		seq(func(fr *framer) {
			fr.WritePing(false, [8]byte{1, 2, 3})
			fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
			fr.WriteWindowUpdate(0, 1<<20)
			fr.WriteGoAway(0, http2.ErrCodeNo, []byte("bye"))
		}),
		// A call with no window to answer in.
		seq(func(fr *framer) {
			fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(fr, pathRLS), EndHeaders: true})
			fr.WriteData(1, true, request)
		}),
		// A call reset in the middle.
		seq(func(fr *framer) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(fr, pathRLS), EndHeaders: true})
			fr.WriteData(1, false, request[:5])
			fr.WriteRSTStream(1, http2.ErrCodeCancel)
			fr.WriteData(1, true, request[5:])
		}),
		// Violations.
		seq(func(fr *framer) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0xff, 0x7f}, EndHeaders: true})
		}),
		seq(func(fr *framer) { fr.WriteData(0, true, []byte("x")) }),
		seq(func(fr *framer) { fr.WriteContinuation(1, true, block(fr, pathRLS)) }),
		seq(func(fr *framer) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(fr, pathRLS), EndHeaders: true,
				Priority: http2.PriorityParam{StreamDep: 1}})
		}),
		seq(func(fr *framer) { fr.WriteWindowUpdate(1, 0) }),
		// A dynamic table size update past SETTINGS_HEADER_TABLE_SIZE.
		seq(func(fr *framer) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x3f, 0xe1, 0xff, 0x03}, EndHeaders: true})
		}),
		{0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01}, // a frame of 16 MiB announced
		{0x00, 0x00, 0x08, 0x06},                               // a frame header cut short
		[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
	}
}
