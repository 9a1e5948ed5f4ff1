package httplimit

import (
	"net/http/httptest"
	"net/netip"
	"testing"
)

func TestClientIP(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	tests := []struct {
		name    string
		trusted []netip.Prefix
		remote  string
		xff     []string
		want    string
	}{
		{"no proxies: peer, header ignored", nil, "203.0.113.9:1234", []string{"1.1.1.1"}, "ip:203.0.113.9"},
		{"untrusted peer: header ignored", trusted, "203.0.113.9:1234", []string{"1.1.1.1"}, "ip:203.0.113.9"},
		{"trusted peer: rightmost untrusted", trusted, "10.0.0.2:80", []string{"6.6.6.6, 198.51.100.7"}, "ip:198.51.100.7"},
		{"chain of trusted proxies", trusted, "10.0.0.2:80", []string{"6.6.6.6, 198.51.100.7, 10.1.1.1", "10.2.2.2"}, "ip:198.51.100.7"},
		{"spoofed left entries never believed", trusted, "10.0.0.2:80", []string{"10.9.9.9, 198.51.100.7"}, "ip:198.51.100.7"},
		{"all trusted: leftmost", trusted, "10.0.0.2:80", []string{"10.3.3.3, 10.4.4.4"}, "ip:10.3.3.3"},
		{"no header: peer", trusted, "10.0.0.2:80", nil, "ip:10.0.0.2"},
		{"garbage ends the walk at the last trusted hop", trusted, "10.0.0.2:80", []string{"198.51.100.7, nonsense"}, "ip:10.0.0.2"},
		{"ipv6 peer", nil, "[2001:db8::1]:443", nil, "ip:2001:db8::1"},
		{"v4-mapped unmapped", nil, "[::ffff:192.0.2.1]:443", nil, "ip:192.0.2.1"},
		{"ipv6 behind trusted v6 proxy", trusted, "[fd00::1]:443", []string{"2001:db8::7"}, "ip:2001:db8::7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tt.remote
			for _, v := range tt.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			got, err := ClientIP(tt.trusted...)(r)
			if err != nil || got != tt.want {
				t.Fatalf("ClientIP = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "not an address"
	if _, err := ClientIP()(r); err == nil {
		t.Fatal("no error for a bad peer address")
	}
}
