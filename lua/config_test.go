package lua

import (
	"strings"
	"testing"
)

func TestParseURL(t *testing.T) {
	tests := []struct {
		in      string
		want    Config
		wantErr string // substring of the error; "" means success
	}{
		{in: "127.0.0.1:6379", want: Config{Addrs: []string{"127.0.0.1:6379"}}},
		{in: "redis.local", want: Config{Addrs: []string{"redis.local:6379"}}},
		{in: " h1:7000,h2:7001 , h3:7002 ", want: Config{Addrs: []string{"h1:7000", "h2:7001", "h3:7002"}}},
		{in: "[::1]:6380", want: Config{Addrs: []string{"[::1]:6380"}}},
		{in: "redis://h:6379", want: Config{Addrs: []string{"h:6379"}}},
		{in: "redis://u:p%40ss@h:6379/3", want: Config{Addrs: []string{"h:6379"}, Username: "u", Password: "p@ss", DB: 3}},
		{in: "redis://:secret@h:6379/", want: Config{Addrs: []string{"h:6379"}, Password: "secret"}},
		{in: "redis://u:p@h1:1,h2:2", want: Config{Addrs: []string{"h1:1", "h2:2"}, Username: "u", Password: "p"}},
		{in: "redis://h:1?password=x&username=y", want: Config{Addrs: []string{"h:1"}, Username: "y", Password: "x"}},
		{in: "sentinel://mymaster@s1:26379,s2:26379", want: Config{Addrs: []string{"s1:26379", "s2:26379"}, SentinelMaster: "mymaster"}},
		{in: "sentinel://mymaster@s1:26379/2?password=pw&sentinel_password=spw", want: Config{Addrs: []string{"s1:26379"}, SentinelMaster: "mymaster", DB: 2, Password: "pw", SentinelPassword: "spw"}},

		{in: "", wantErr: "empty"},
		{in: "   ", wantErr: "empty"},
		{in: "h:0", wantErr: "port must be a number in 1..65535"},
		{in: "h:99999", wantErr: "port"},
		{in: "h:abc", wantErr: "port"},
		{in: ":6379", wantErr: "missing host"},
		{in: "h1:1,,h2:2", wantErr: "empty address"},
		{in: "h1:1,", wantErr: "empty address"},
		{in: "u:p@h:1", wantErr: "need the redis:// form"},
		{in: "h:1/2", wantErr: "need the redis:// form"},
		{in: "rediss://h:1", wantErr: "TLS"},
		{in: "http://h:1", wantErr: "scheme"},
		{in: "redis://h:1/x", wantErr: "db"},
		{in: "redis://h:1/-1", wantErr: "db"},
		{in: "redis://h1:1,h2:2/1", wantErr: "Cluster has only db 0"},
		{in: "redis://h:1?bogus=1", wantErr: "unknown option \"bogus\""},
		{in: "redis://h:1?password=%zz", wantErr: "options"},
		{in: "redis://u:%zz@h:1", wantErr: "password"},
		{in: "sentinel://s1:26379", wantErr: "master"},
		{in: "sentinel://@s1:26379", wantErr: "master"},
		{in: "redis://h h:1", wantErr: "bad character"},
		{in: "redis://h:1?password=x;y", want: Config{Addrs: []string{"h:1"}, Password: "x;y"}},
		{in: "redis://h:1?password", wantErr: "not name=value"},
	}
	for _, tt := range tests {
		got, err := ParseURL(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseURL(%q) error = %v, want one containing %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseURL(%q) = %v", tt.in, err)
			continue
		}
		if !equalConfig(got, tt.want) {
			t.Errorf("ParseURL(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func equalConfig(a, b Config) bool {
	if len(a.Addrs) != len(b.Addrs) {
		return false
	}
	for i := range a.Addrs {
		if a.Addrs[i] != b.Addrs[i] {
			return false
		}
	}
	return a.SentinelMaster == b.SentinelMaster && a.Username == b.Username && a.Password == b.Password &&
		a.SentinelUsername == b.SentinelUsername && a.SentinelPassword == b.SentinelPassword && a.DB == b.DB
}

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"127.0.0.1:6379", "h1:1,h2:2,h3:3", "redis://u:p@h:6379/2", "sentinel://m@s:26379,t:26379",
		"redis://h:1?password=x", "[::1]:1", "rediss://x", "", "redis://@/", "sentinel://@", "a:b:c",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseURL(s)
		if err != nil {
			if c.Addrs != nil {
				t.Fatalf("ParseURL(%q) returned addresses with an error", s)
			}
			return
		}
		if len(c.Addrs) == 0 {
			t.Fatalf("ParseURL(%q) succeeded without addresses", s)
		}
		if err := c.withDefaults().validate(); err != nil {
			t.Fatalf("ParseURL(%q) = %+v, which does not validate: %v", s, c, err)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Addrs: []string{"h:1"}}
	tests := []struct {
		name    string
		mod     func(*Config)
		wantErr string
	}{
		{"no addrs", func(c *Config) { c.Addrs = nil }, "addrs"},
		{"bad addr", func(c *Config) { c.Addrs = []string{"nope"} }, "addrs"},
		{"brace prefix", func(c *Config) { c.KeyPrefix = "a{b" }, "key_prefix"},
		{"negative db", func(c *Config) { c.DB = -1 }, "db"},
		{"cluster db", func(c *Config) { c.Addrs = []string{"a:1", "b:2"}; c.DB = 1 }, "db"},
		{"negative timeout", func(c *Config) { c.CallTimeout = -1 }, "call_timeout"},
	}
	for _, tt := range tests {
		c := ok
		tt.mod(&c)
		err := c.withDefaults().validate()
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: validate = %v, want an error naming %q", tt.name, err, tt.wantErr)
		}
	}
	if err := ok.withDefaults().validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
	if _, err := NewStore(Config{}); err == nil || !strings.Contains(err.Error(), "addrs") {
		t.Errorf("NewStore(Config{}) = %v, want an error naming addrs", err)
	}
}
