package store

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/windowstore/windowstore/internal/codec"
	"github.com/windowstore/windowstore/internal/keyspace"
)

func TestWindowValidate(t *testing.T) {
	tests := []struct {
		w   Window
		msg string // "" when valid
	}{
		{Window{10 * time.Minute, time.Minute}, ""},
		{Window{time.Second, time.Millisecond}, ""},
		{Window{}, "store: window: invalid argument: bucket 0s is shorter than 1ms"},
		{Window{time.Minute, 0}, "store: window: invalid argument: bucket 0s is shorter than 1ms"},
		{Window{0, time.Second}, "store: window: invalid argument: window length 0s is not positive"},
		{Window{-time.Minute, time.Second}, "store: window: invalid argument: window length -1m0s is not positive"},
		{Window{time.Minute, 7 * time.Second}, "store: window: invalid argument: bucket 7s does not divide window 1m0s"},
		{Window{time.Minute, time.Hour}, "store: window: invalid argument: bucket 1h0m0s does not divide window 1m0s"},
		{Window{codec.MaxWindow + time.Hour, time.Hour}, "store: window: invalid argument: window 4321h0m0s is longer than the maximum 4320h0m0s"},
	}
	for _, tt := range tests {
		err := tt.w.Validate()
		if tt.msg == "" {
			if err != nil {
				t.Errorf("%v: %v", tt.w, err)
			}
			continue
		}
		if err == nil || err.Error() != tt.msg {
			t.Errorf("%v.Validate() = %v, want %q", tt.w, err, tt.msg)
		}
		if !errors.Is(err, ErrInvalid) || !errors.Is(err, codec.ErrInvalid) {
			t.Errorf("%v: %v does not wrap both sentinels", tt.w, err)
		}
	}
}

func TestWindowTag(t *testing.T) {
	for _, tt := range []struct {
		w    Window
		want string
	}{
		{Window{10 * time.Minute, time.Minute}, "10m/1m"},
		{Window{24 * time.Hour, time.Hour}, "1d/1h"},
		{Window{90 * time.Second, 500 * time.Millisecond}, "90s/500ms"},
		{Window{36 * time.Hour, 90 * time.Minute}, "36h/90m"},
		{Window{1500 * time.Millisecond, 1500 * time.Millisecond}, "1500ms/1500ms"},
	} {
		if got := tt.w.tag(); got != tt.want {
			t.Errorf("%v.tag() = %q, want %q", tt.w, got, tt.want)
		}
	}
}

func TestKeyChecked(t *testing.T) {
	space, _ := keyspace.New("ws:")
	st := &Store{space: space}
	for k, msg := range map[string]string{
		"":                        `store: key: invalid argument: empty key`,
		strings.Repeat("k", 1025): "store: key \"" + strings.Repeat("k", 1025) + "\": invalid argument: key of 1025 bytes is longer than 1024",
	} {
		_, err := st.redisKey(k, "10s/1s")
		if !errors.Is(err, ErrInvalid) || err.Error() != msg {
			t.Errorf("redisKey(%d bytes) = %v, want %q", len(k), err, msg)
		}
	}
	for _, k := range []string{"user:42", "ip:::1", strings.Repeat("k", 1024), "\xff\x00", "{x}"} {
		if _, err := st.redisKey(k, "10s/1s"); err != nil {
			t.Errorf("redisKey(%q) = %v", k, err)
		}
	}
}

func TestParseInfo(t *testing.T) {
	tests := []struct{ info, server, version string }{
		{"# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n", "redis", "7.0.15"},
		{"# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.1.1\r\n", "valkey", "8.1.1"},
		{"", "unknown", ""},
	}
	for _, tt := range tests {
		s, v := parseInfo(tt.info)
		if s != tt.server || v != tt.version {
			t.Errorf("parseInfo(%q) = %q %q", tt.info, s, v)
		}
	}
}

func TestPick(t *testing.T) {
	plain := Detection{have: map[string]bool{"hincrby": true}}
	ttl := Detection{have: map[string]bool{"hincrby": true, "hpexpireat": true}}
	tair := Detection{have: map[string]bool{"hincrby": true, "hpexpireat": true, "exhincrby": true, "exhpexpireat": true}}
	blind := Detection{blind: true, have: map[string]bool{}}
	tests := []struct {
		d       Detection
		want    string
		backend string
		msg     string // the error, when one is wanted
	}{
		{plain, "auto", "nativehash-plain", ""},
		{ttl, "auto", "nativehash-fieldttl", ""},
		{ttl, "nativehash-plain", "nativehash-plain", ""},
		{ttl, "nativehash", "nativehash-fieldttl", ""},
		{plain, "nativehash", "nativehash-plain", ""},
		{tair, "auto", "tairhash", ""},
		{tair, "nativehash", "nativehash-fieldttl", ""},
		{blind, "auto", "nativehash-plain", ""},
		{plain, "memcached", "", `store: new: invalid argument: unknown backend "memcached" (want auto, tairhash, nativehash, nativehash-fieldttl, nativehash-plain)`},
		{plain, "tairhash", "", "store: new: backend not available on this server: tairhash: the server lacks EXHINCRBY, EXHPEXPIREAT"},
		{plain, "nativehash-fieldttl", "", "store: new: backend not available on this server: nativehash-fieldttl: the server lacks HPEXPIREAT"},
		{blind, "nativehash-fieldttl", "", "store: new: backend not available on this server: nativehash-fieldttl: the server lacks what it needs (COMMAND INFO was refused)"},
	}
	for _, tt := range tests {
		d := tt.d
		b, err := d.pick(tt.want)
		if tt.msg != "" {
			if err == nil || err.Error() != tt.msg {
				t.Errorf("pick(%s) = %v, want %q", tt.want, err, tt.msg)
			}
			continue
		}
		if err != nil || b.Name != tt.backend || d.Backend != tt.backend || d.Reason == "" {
			t.Errorf("pick(%s) = %v, %v; detection %+v", tt.want, b, err, d)
		}
	}
}

func TestRemaining(t *testing.T) {
	for _, tt := range []struct{ limit, sum, want int64 }{
		{10, 3, 7}, {10, 10, 0}, {10, 12, 0}, {10, -5, 10}, {10, -1 << 63, 10}, {0, 0, 0}, {1 << 53, 1<<63 - 1, 0},
	} {
		if got := remaining(tt.limit, tt.sum); got != tt.want {
			t.Errorf("remaining(%d, %d) = %d, want %d", tt.limit, tt.sum, got, tt.want)
		}
	}
}

func TestRetryBackoff(t *testing.T) {
	want := []time.Duration{10, 20, 40, 80, 160, 320, 500, 500, 500}
	for i, w := range want {
		if got := retryBackoff(i); got != w*time.Millisecond {
			t.Errorf("retryBackoff(%d) = %v, want %v", i, got, w*time.Millisecond)
		}
	}
	if got := retryBackoff(1000); got != maxBackoff {
		t.Errorf("retryBackoff(1000) = %v", got)
	}
}

// TestLeaseIDNotAFlag: a lease id never begins with '-' (a command line
// would read it as a flag: windowctl lease refresh KEY ID), in 10,000 draws
// (one in 64 would, drawn freely).
func TestLeaseIDNotAFlag(t *testing.T) {
	for range 10000 {
		if id := newLeaseID(); len(id) != 22 || id[0] == '-' {
			t.Fatalf("lease id %q", id)
		}
	}
}
