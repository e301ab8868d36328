package main

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// certCheckEvery is how often at most a handshake looks at -tls-cert and
// -tls-key for a new pair.
const certCheckEvery = time.Second

// certFiles serves the node's certificate from -tls-cert and -tls-key and
// follows their rotation (cert-manager, a mesh's agent, a renewed Let's
// Encrypt pair): a handshake at least certCheckEvery after the last look
// reads both files (a few KB), and a changed pair that loads is served
// from then on. A pair that does not load (half written, a key that does
// not match) is logged once and the last good one kept: a rotation never
// takes the node's TLS down. The HTTP API, the internal endpoint and the
// rate limit service all serve through it.
type certFiles struct {
	cert, key string
	log       *slog.Logger
	now       func() time.Time

	mu      sync.Mutex
	cur     *tls.Certificate
	seen    [2][]byte // the files' contents when last read
	checked time.Time
}

// newCertFiles loads the pair: an error if it does not load now.
func newCertFiles(cert, key string, log *slog.Logger) (*certFiles, error) {
	c := &certFiles{cert: cert, key: key, log: log, now: time.Now}
	files, err := c.read()
	if err == nil {
		err = c.load(files)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot load -tls-cert/-tls-key: %w", err)
	}
	c.checked = c.now()
	return c, nil
}

// read reads both files.
func (c *certFiles) read() (files [2][]byte, err error) {
	for i, p := range []string{c.cert, c.key} {
		if files[i], err = os.ReadFile(p); err != nil {
			return files, err
		}
	}
	return files, nil
}

// load serves the pair in files if it loads; either way they are what was
// last seen, so a bad pair is tried again only once it changes. c.mu is
// held, or c is not yet shared.
func (c *certFiles) load(files [2][]byte) error {
	c.seen = files
	pair, err := tls.X509KeyPair(files[0], files[1])
	if err != nil {
		return err
	}
	c.cur = &pair
	return nil
}

// get is tls.Config.GetCertificate.
func (c *certFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := c.now(); now.Sub(c.checked) >= certCheckEvery {
		c.checked = now
		c.reloadIfChanged()
	}
	return c.cur, nil
}

// reloadIfChanged loads the pair if either file changed since it was
// last read. c.mu is held.
func (c *certFiles) reloadIfChanged() {
	files, err := c.read()
	if err != nil || bytes.Equal(files[0], c.seen[0]) && bytes.Equal(files[1], c.seen[1]) {
		return // (a file being replaced is read again next time)
	}
	if err := c.load(files); err != nil {
		c.log.Warn("cannot load the new -tls-cert/-tls-key: serving the previous certificate", "cert", c.cert, "err", err)
		return
	}
	c.log.Info("TLS certificate reloaded", "cert", c.cert, "not_after", c.cur.Leaf.NotAfter)
}
