// Command ceiling is the "bare fasthttp handler" of the HTTP budget
// (a single check ≥ 80% of it; docs/performance.md): a fasthttp server with the node's settings
// whose handler reads the body and replays one canned answer, the same
// status, headers and body that sluiced gave to the same request. It does
// no other work, so its throughput is the most any fasthttp server can do
// with responses of that size on this machine.
//
//	go build -o /tmp/ceiling ./node/testdata/ceiling
//	/tmp/ceiling -listen 127.0.0.1:18081 -from http://127.0.0.1:18080/v1/check -body '{"rule":"bench","key":"u1"}'
//
// It lives under node/testdata so that it is never part of ./... builds.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"time"

	"github.com/valyala/fasthttp"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18081", "address to serve")
	from := flag.String("from", "", "sluiced URL whose answer to -body is replayed (required)")
	body := flag.String("body", `{"rule":"bench","key":"u1"}`, "request body sent to -from")
	flag.Parse()
	if *from == "" {
		log.Fatal("ceiling: -from is required")
	}

	// Record sluiced's answer once.
	req, res := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	req.SetRequestURI(*from)
	req.Header.SetMethod("POST")
	req.SetBodyString(*body)
	if err := fasthttp.DoTimeout(req, res, 5*time.Second); err != nil {
		log.Fatalf("ceiling: cannot probe %s: %v", *from, err)
	}
	status := res.StatusCode()
	cannedBody := append([]byte(nil), res.Body()...)
	var hdrs [][2][]byte
	for k, v := range res.Header.All() {
		switch string(k) {
		case "Date", "Content-Length", "Content-Type", "Server":
			continue // written by fasthttp
		}
		hdrs = append(hdrs, [2][]byte{append([]byte(nil), k...), append([]byte(nil), v...)})
	}
	ctype := append([]byte(nil), res.Header.ContentType()...)
	fmt.Printf("ceiling: replaying %d, %d headers, %d-byte body: %s\n", status, len(hdrs), len(cannedBody), cannedBody)

	// The node's server settings (node.New), only the handler differs.
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			_ = ctx.PostBody()
			ctx.SetStatusCode(status)
			for _, h := range hdrs {
				ctx.Response.Header.SetCanonical(h[0], h[1])
			}
			ctx.SetContentTypeBytes(ctype)
			ctx.SetBody(cannedBody)
		},
		Name:                  "sluice",
		MaxRequestBodySize:    1 << 20,
		ReadBufferSize:        8 << 10,
		ReadTimeout:           5 * time.Second,
		WriteTimeout:          5 * time.Second,
		IdleTimeout:           90 * time.Second,
		CloseOnShutdown:       true,
		NoDefaultServerHeader: true,
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(srv.Serve(ln))
}
