package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/sluicehq/sluice/node/rls"
)

// rlsDaemon is the Envoy rate limit service of a daemon (-rls-listen):
// the gRPC server, its listener and the reloader of -rls-config.
type rlsDaemon struct {
	srv    *rls.Server
	ln     net.Listener
	rl     *rls.Reloader // nil without -rls-config
	served chan error
}

// startRLS starts the Envoy rate limit service when -rls-listen is set:
// the configuration must load, or the daemon does not start.
func (d *daemon) startRLS(o options) error {
	if o.rlsListen == "" {
		if o.rlsConfig != "" {
			return fmt.Errorf("-rls-config (SLUICE_RLS_CONFIG) needs -rls-listen (SLUICE_RLS_LISTEN)")
		}
		return nil
	}
	tlsConf, err := rlsTLS(o, d.log)
	if err != nil {
		return err
	}
	srv := rls.NewServer(rls.ServerConfig{
		Engine:          d.node,
		Metrics:         d.node.MetricsSet(),
		Logger:          d.log,
		ResponseHeaders: o.rlsHeaders,
		DynamicMetadata: o.rlsMetadata,
		Transport:       o.rlsTransport,
		MaxConns:        noneIfZero(o.rlsMaxConns),
		IdleTimeout:     noneIfZero(o.rlsIdleTimeout),
		TLS:             tlsConf,
	})
	r := &rlsDaemon{srv: srv, served: make(chan error, 1)}
	if o.rlsConfig != "" {
		r.rl = rls.NewReloader(srv, o.rlsConfig)
		if err := r.rl.Load(); err != nil {
			return fmt.Errorf("cannot load the rate limit configuration: %w", err)
		}
	} else {
		d.log.Warn("-rls-listen without -rls-config: every rate limit call is answered UNAVAILABLE")
	}
	ln, err := net.Listen("tcp", o.rlsListen)
	if err != nil {
		return fmt.Errorf("cannot listen on %s (-rls-listen): %w", o.rlsListen, err)
	}
	r.ln = ln
	d.rls = r
	d.log.Info("envoy rate limit service listening", "addr", ln.Addr().String(), "config", o.rlsConfig,
		"tls", tlsConf != nil, "client_ca", o.rlsClientCA)
	go func() { r.served <- srv.Serve(ln) }()
	return nil
}

// rlsTLS is the rate limit service's TLS configuration: nil without
// -tls-cert; the node's certificate (followed as it rotates, as the HTTP
// API's), and with -rls-client-ca a required client certificate that
// chains to it.
func rlsTLS(o options, log *slog.Logger) (*tls.Config, error) {
	srv, _, err := loadTLS(o, log)
	if srv == nil || err != nil {
		return nil, err
	}
	if o.rlsClientCA != "" {
		pem, err := os.ReadFile(o.rlsClientCA)
		if err != nil {
			return nil, fmt.Errorf("cannot read -rls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-rls-client-ca %s: no PEM certificate in it", o.rlsClientCA)
		}
		srv.ClientCAs, srv.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return srv, nil
}

// noneIfZero maps a flag's 0 (none) to rls.ServerConfig's -1 (its 0 is
// the default).
func noneIfZero[T int | time.Duration](v T) T {
	if v == 0 {
		return -1
	}
	return v
}

// loop reloads -rls-config every poll when its files changed, until ctx
// ends.
func (r *rlsDaemon) loop(ctx context.Context, poll time.Duration) {
	if r == nil || r.rl == nil {
		return
	}
	r.rl.Run(ctx, poll)
}

// stop stops the gRPC server, letting calls in flight finish within
// shutdownTimeout.
func (r *rlsDaemon) stop() {
	if r == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	r.srv.Close(ctx)
	<-r.served
}
