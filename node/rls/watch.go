package rls

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Reloader keeps a Server's configuration in step with a file or
// directory. Its methods are called from one goroutine at a time (Load,
// then Run).
type Reloader struct {
	srv  *Server
	path string
	// stamp is a hash of the files' names, sizes and modification times
	// at the last look; lastErr the last error reported (reported once).
	stamp   uint64
	lastErr string
}

// NewReloader returns a Reloader of srv's configuration from path.
func NewReloader(srv *Server, path string) *Reloader {
	return &Reloader{srv: srv, path: path}
}

// Load loads the configuration and installs it; an error means nothing
// was installed.
func (r *Reloader) Load() error {
	stamp, err := r.look()
	if err != nil {
		return err
	}
	c, err := Load(r.path)
	if err != nil {
		return err
	}
	r.stamp = stamp
	r.install(c, "rate limit configuration loaded")
	return nil
}

// install installs c, counting the load and logging it and c's warnings.
func (r *Reloader) install(c *Config, msg string) {
	r.srv.SetConfig(c)
	r.srv.met.loads.Inc()
	r.srv.log.Info(msg, "path", r.path, "domains", c.Domains(), "limits", len(c.Limits()))
	for _, w := range c.Warnings() {
		r.srv.log.Warn("rate limit configuration: "+w, "path", r.path)
	}
}

// Run checks the files every poll and reloads them when they changed,
// until ctx ends. A configuration that does not load is refused whole:
// the error (file, descriptor path, field) is logged once and counted in
// sluice_rls_config_errors_total, and the last good one stays in use.
func (r *Reloader) Run(ctx context.Context, poll time.Duration) {
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.Check()
		}
	}
}

// Check reloads the configuration if its files changed since the last
// look; it reports whether a new configuration was installed.
func (r *Reloader) Check() bool {
	stamp, err := r.look()
	if err == nil && stamp == r.stamp {
		return false
	}
	if err == nil {
		var c *Config
		if c, err = Load(r.path); err == nil {
			r.stamp = stamp
			r.lastErr = ""
			r.install(c, "rate limit configuration reloaded")
			return true
		}
	}
	if err.Error() != r.lastErr {
		r.lastErr = err.Error()
		r.srv.met.loadErrors.Inc()
		r.srv.log.Error("rate limit configuration refused; keeping the last good one", "path", r.path, "err", err)
	}
	r.stamp = stamp // a refused version is not read again until it changes
	return false
}

// look hashes the names, sizes and modification times of the files.
func (r *Reloader) look() (uint64, error) {
	fi, err := os.Stat(r.path)
	if err != nil {
		return 0, fmt.Errorf("cannot read the rate limit configuration: %w", err)
	}
	h := xxhash.New()
	files := []string{r.path}
	if fi.IsDir() {
		if files, err = configFiles(r.path); err != nil {
			return 0, err
		}
	}
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			return 0, fmt.Errorf("cannot read the rate limit configuration: %w", err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00%d\x00", f, fi.Size(), fi.ModTime().UnixNano())
	}
	return h.Sum64(), nil
}
