// Command delayproxy is the inter-region link of deploy/regions.sh: a TCP
// proxy on loopback that holds every byte back by -delay each way (a
// round trip through it takes twice that more).
//
//	delayproxy -listen 127.0.0.1:9191 -target 127.0.0.1:9190 -delay 40ms
//
// It stops on SIGINT or SIGTERM.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/node/member/netsim"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "loopback address to listen on")
	target := flag.String("target", "", "host:port to forward to")
	delay := flag.Duration("delay", 40*time.Millisecond, "one-way delay")
	flag.Parse()
	if h, _, err := net.SplitHostPort(*listen); err != nil || !net.ParseIP(h).IsLoopback() {
		fmt.Fprintln(os.Stderr, "delayproxy: -listen must be a loopback host:port")
		os.Exit(2)
	}
	p, err := netsim.ListenProxy(*listen, *target)
	if err != nil {
		fmt.Fprintln(os.Stderr, "delayproxy:", err)
		os.Exit(1)
	}
	p.SetDelay(*delay)
	fmt.Printf("delayproxy: %s -> %s, %v each way\n", p.Addr(), *target, *delay)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	p.Close()
}
