package member

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseClusterKey(t *testing.T) {
	k16 := bytes.Repeat([]byte{0xab}, 16)
	k32 := bytes.Repeat([]byte{0xfe}, 32)
	for _, tc := range []struct {
		name, in string
		want     []byte
		errHas   string
	}{
		{"std 16", base64.StdEncoding.EncodeToString(k16), k16, ""},
		{"std 32 with spaces", " " + base64.StdEncoding.EncodeToString(k32) + "\n", k32, ""},
		{"raw std", base64.RawStdEncoding.EncodeToString(k32), k32, ""},
		{"url", base64.URLEncoding.EncodeToString(k32), k32, ""},
		{"24 bytes", base64.StdEncoding.EncodeToString(make([]byte, 24)), make([]byte, 24), ""},
		{"empty", "", nil, "empty"},
		{"not base64", "this is not base64!", nil, "not base64"},
		{"too short", base64.StdEncoding.EncodeToString(make([]byte, 15)), nil, "15 bytes, want 16, 24 or 32"},
		{"too long", base64.StdEncoding.EncodeToString(make([]byte, 33)), nil, "33 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseClusterKey(tc.in)
			if tc.errHas != "" {
				if !errors.Is(err, ErrClusterKey) || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("err = %v, want ErrClusterKey mentioning %q", err, tc.errHas)
				}
				return
			}
			if err != nil || !bytes.Equal(got, tc.want) {
				t.Fatalf("= %x, %v; want %x", got, err, tc.want)
			}
		})
	}
}

func FuzzParseClusterKey(f *testing.F) {
	f.Add(base64.StdEncoding.EncodeToString(make([]byte, 32)))
	f.Add("")
	f.Add("====")
	f.Add("AAAA\x00")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseClusterKey(s)
		if err != nil {
			if !errors.Is(err, ErrClusterKey) {
				t.Fatalf("error %v is not ErrClusterKey", err)
			}
			return
		}
		if n := len(k); n != 16 && n != 24 && n != 32 {
			t.Fatalf("accepted a %d-byte key", n)
		}
	})
}

func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		field string
		edit  func(*Config)
	}{
		{"BindAddr", func(c *Config) { c.BindAddr = "7946" }},
		{"BindAddr", func(c *Config) { c.BindAddr = ":99999" }},
		{"AdvertiseAddr", func(c *Config) { c.AdvertiseAddr = "10.0.0.1" }},
		{"HTTPAddr", func(c *Config) { c.HTTPAddr = "localhost" }},
		{"HTTPAddr", func(c *Config) { c.HTTPAddr = strings.Repeat("h", 300) + ":80" }},
		{"Join[1]", func(c *Config) { c.Join = []string{"a:1", "b"} }},
		{"ClusterKey", func(c *Config) { c.ClusterKey = make([]byte, 10) }},
		{"ClusterKey", func(c *Config) { c.ClusterKey = nil }}, // no key, not Insecure: refused
		{"ClusterKey", func(c *Config) { c.ClusterKey = []byte{}; c.Insecure = false }},
		{"MessageQueue", func(c *Config) { c.MessageQueue = -1 }},
		{"SuspicionMult", func(c *Config) { c.SuspicionMult = -2 }},
		{"ProbeInterval", func(c *Config) { c.ProbeInterval = -time.Second }},
		{"ProbeTimeout", func(c *Config) { c.ProbeTimeout = 2 * time.Second }},
		{"JoinRetryMin", func(c *Config) { c.JoinRetryMin = time.Minute }},
		{"TCPTimeout", func(c *Config) { c.TCPTimeout = -1 }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.ClusterKey = make([]byte, 16)
			tc.edit(&cfg)
			_, err := cfg.withDefaults()
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.field+":") {
				t.Fatalf("err = %v, want ErrConfig naming %s", err, tc.field)
			}
			// Start refuses it too, before touching the network.
			if _, err := Start(cfg, nil); !errors.Is(err, ErrConfig) {
				t.Fatalf("Start: err = %v, want ErrConfig", err)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	got, err := Config{HTTPAddr: ":8080", Insecure: true}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	d := DefaultConfig()
	if got.BindAddr != ":7946" || got.ProbeInterval != d.ProbeInterval || got.GossipInterval != d.GossipInterval ||
		got.ReconnectInterval != d.ReconnectInterval || got.MessageQueue != d.MessageQueue {
		t.Errorf("zero fields not defaulted: %+v", got)
	}
	if !strings.HasSuffix(got.Name, "-8080") {
		t.Errorf("default name %q does not end with the HTTP port", got.Name)
	}
}

func TestMetaRoundTrip(t *testing.T) {
	for _, m := range []meta{
		{},
		{httpAddr: "10.0.0.1:8080"},
		{httpAddr: "[fe80::1]:8080", leaving: true},
		{httpAddr: strings.Repeat("x", maxHTTPAddr)},
	} {
		b := encodeMeta(m)
		if len(b) > metaMaxBytes || len(b) > 512 {
			t.Errorf("meta of %d bytes exceeds the limit", len(b))
		}
		got, err := decodeMeta(b)
		if err != nil || got != m {
			t.Errorf("decode(encode(%+v)) = %+v, %v", m, got, err)
		}
	}
	// A later version that appends a field still yields the known fields.
	future := append(encodeMeta(meta{httpAddr: "h:1"}), 0xff, 0xee)
	future[0] = 2
	if got, err := decodeMeta(future); err != nil || got.httpAddr != "h:1" {
		t.Errorf("future meta = %+v, %v", got, err)
	}
	for _, bad := range [][]byte{{0}, {1}, {1, 0}, {1, 0, 5, 'a'}} {
		if _, err := decodeMeta(bad); !errors.Is(err, ErrMeta) {
			t.Errorf("decodeMeta(%v) err = %v, want ErrMeta", bad, err)
		}
	}
}

func FuzzDecodeMeta(f *testing.F) {
	f.Add(encodeMeta(meta{httpAddr: "127.0.0.1:8080"}))
	f.Add(encodeMeta(meta{leaving: true}))
	f.Add([]byte{})
	f.Add([]byte{1, 0, 200})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			if !errors.Is(err, ErrMeta) {
				t.Fatalf("error %v is not ErrMeta", err)
			}
			return
		}
		if len(m.httpAddr) > maxHTTPAddr {
			t.Fatalf("decoded a %d-byte address", len(m.httpAddr))
		}
		// What decodes re-encodes to a meta that decodes the same.
		if again, err := decodeMeta(encodeMeta(m)); err != nil || again != m {
			t.Fatalf("re-encode of %+v gave %+v, %v", m, again, err)
		}
	})
}
