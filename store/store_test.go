package store

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/windowstore/windowstore/fieldcodec"
)

func TestWindowValidate(t *testing.T) {
	tests := []struct {
		w  Window
		ok bool
	}{
		{Window{10 * time.Minute, time.Minute}, true},
		{Window{time.Second, time.Millisecond}, true},
		{Window{}, false},
		{Window{time.Minute, 0}, false},
		{Window{0, time.Second}, false},
		{Window{-time.Minute, time.Second}, false},
		{Window{time.Minute, 7 * time.Second}, false},
		{Window{time.Minute, time.Hour}, false},
		{Window{fieldcodec.MaxWindow + time.Hour, time.Hour}, false},
	}
	for _, tt := range tests {
		err := tt.w.Validate()
		if (err == nil) != tt.ok {
			t.Errorf("%v.Validate() = %v, want ok=%v", tt.w, err, tt.ok)
		}
		if err != nil && (!errors.Is(err, ErrInvalid) || !errors.Is(err, fieldcodec.ErrInvalid)) {
			t.Errorf("%v: %v does not wrap both sentinels", tt.w, err)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "store: ") {
			t.Errorf("error %q does not start with the package name", err)
		}
	}
}

func TestCheckKey(t *testing.T) {
	for _, k := range []string{"", strings.Repeat("k", MaxKeyLen+1)} {
		if err := CheckKey(k); !errors.Is(err, ErrInvalid) {
			t.Errorf("CheckKey(%d bytes) = %v", len(k), err)
		}
	}
	for _, k := range []string{"user:42", "ip:::1", strings.Repeat("k", MaxKeyLen), "\xff\x00"} {
		if err := CheckKey(k); err != nil {
			t.Errorf("CheckKey(%q) = %v", k, err)
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
	tests := []struct {
		d       Detection
		want    Backend
		backend string
		ttl     bool
		err     error
	}{
		{Detection{}, Auto, "nativehash", false, nil},
		{Detection{hashFieldTTL: true}, Auto, "nativehash", true, nil},
		{Detection{hashFieldTTL: true}, NativeHashPlain, "nativehash", false, nil},
		{Detection{}, NativeHash, "nativehash", false, nil},
		{Detection{}, "memcached", "", false, ErrInvalid},
		{Detection{}, TairHash, "", false, ErrUnavailable},
		{Detection{tairHash: true, hashFieldTTL: true}, Auto, "tairhash", true, nil},
		{Detection{tairHash: true, hashFieldTTL: true}, NativeHash, "nativehash", true, nil},
	}
	for _, tt := range tests {
		b, err := tt.d.pick(tt.want)
		if tt.err != nil {
			if !errors.Is(err, tt.err) {
				t.Errorf("pick(%s) = %v, want %v", tt.want, err, tt.err)
			}
			continue
		}
		if err != nil || b.Name != tt.backend || b.FieldTTL != tt.ttl || tt.d.Reason == "" {
			t.Errorf("pick(%s) = %+v, %v", tt.want, b, err)
		}
	}
}
