package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// DirRulesFile is the file a DirStore keeps in its directory.
const DirRulesFile = "rules.json"

// maxDirRulesBytes bounds the file a DirStore reads.
const maxDirRulesBytes = 64 << 20

// DirStore is a RuleStore in a local directory (sluiced -data-dir): one
// file, DIR/rules.json, {"version":N,"rules":[...],"sig":"..."} (sig only
// when the writer signed the set), replaced atomically
// on every save (written to a temporary file in the same directory,
// fsynced, renamed over the old one, and the directory fsynced), so that
// a crash leaves either the old set or the new one. It is safe for
// concurrent use within one process; two processes must not share a
// directory.
type DirStore struct {
	dir string
	mu  sync.Mutex // serializes saves (check the version, then replace)
}

// NewDirStore returns the store of dir, creating dir (0700) if needed.
func NewDirStore(dir string) (*DirStore, error) {
	if dir == "" {
		return nil, errors.New("cannot use an empty data directory")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cannot create the data directory: %w", err)
	}
	s := &DirStore{dir: dir}
	if _, _, _, err := s.LoadRules(context.Background()); err != nil {
		return nil, err
	}
	return s, nil
}

// Path returns the rule file's path.
func (s *DirStore) Path() string { return filepath.Join(s.dir, DirRulesFile) }

type dirFile struct {
	Version uint64            `json:"version"`
	Rules   []json.RawMessage `json:"rules"`
	Sig     string            `json:"sig,omitempty"`
}

// LoadRules implements RuleStore. A missing file is version 0, no rules.
func (s *DirStore) LoadRules(context.Context) (uint64, [][]byte, []byte, error) {
	f, err := s.read()
	if err != nil {
		return 0, nil, nil, err
	}
	specs := make([][]byte, len(f.Rules))
	for i, r := range f.Rules {
		specs[i] = r
	}
	var sig []byte
	if f.Sig != "" {
		sig = []byte(f.Sig)
	}
	return f.Version, specs, sig, nil
}

// RulesVersion implements RuleStore.
func (s *DirStore) RulesVersion(ctx context.Context) (uint64, error) {
	f, err := s.read()
	return f.Version, err
}

func (s *DirStore) read() (dirFile, error) {
	var f dirFile
	file, err := os.Open(s.Path())
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return f, fmt.Errorf("cannot read rules: %w", err)
	}
	defer file.Close()
	b, err := io.ReadAll(io.LimitReader(file, maxDirRulesBytes+1))
	if err != nil {
		return f, fmt.Errorf("cannot read rules: %w", err)
	}
	if len(b) > maxDirRulesBytes {
		return f, fmt.Errorf("cannot read rules: %s is larger than %d bytes", s.Path(), maxDirRulesBytes)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return dirFile{}, fmt.Errorf("cannot read rules: %s: %w", s.Path(), err)
	}
	return f, nil
}

// SaveRules implements RuleStore.
func (s *DirStore) SaveRules(_ context.Context, expect, next uint64, names []string, specs [][]byte, sig []byte) (uint64, bool, error) {
	if next == 0 {
		return 0, false, errors.New("cannot save rules: version 0")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, err := s.read()
	if err != nil {
		return 0, false, err
	}
	if cur.Version != expect {
		return cur.Version, false, nil
	}
	f := dirFile{Version: next, Rules: make([]json.RawMessage, len(specs)), Sig: string(sig)}
	for i, b := range specs {
		f.Rules[i] = b
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return 0, false, fmt.Errorf("cannot encode rules: %w", err)
	}
	if err := writeFileAtomic(s.dir, DirRulesFile, append(data, '\n')); err != nil {
		return 0, false, err
	}
	return next, true, nil
}

// writeFileAtomic replaces dir/name with data: temp file, fsync, rename,
// fsync of the directory.
func writeFileAtomic(dir, name string, data []byte) (err error) {
	tmp, err := os.CreateTemp(dir, "."+name+".*.tmp")
	if err != nil {
		return fmt.Errorf("cannot write rules: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return fmt.Errorf("cannot write rules: %w", err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("cannot write rules: %w", err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("cannot write rules: %w", err)
	}
	if err = os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("cannot write rules: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("cannot write rules: %w", err)
	}
	defer d.Close()
	if err = d.Sync(); err != nil {
		return fmt.Errorf("cannot write rules: %w", err)
	}
	return nil
}
