package redisaddr

import (
	"strings"
	"testing"

	"github.com/redis/rueidis"
)

// TestURL: the forms of an address, and the URLs they become.
func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:6379":           "redis://127.0.0.1:6379",
		"localhost:16999":          "redis://localhost:16999",
		"cache.example.com:7000":   "redis://cache.example.com:7000",
		"my_host":                  "redis://my_host:6379",
		"localhost":                "redis://localhost:6379",
		"10.0.0.1":                 "redis://10.0.0.1:6379",
		"[::1]:7000":               "redis://[::1]:7000",
		"[::1]":                    "redis://[::1]:6379",
		"[fe80::1%eth0]:6379":      "redis://[fe80::1%25eth0]:6379",
		"redis://h:1":              "redis://h:1",
		"redis://u:p@h:1/2":        "redis://u:p@h:1/2",
		"rediss://h:1":             "rediss://h:1",
		"REDIS://h:1":              "REDIS://h:1",
		"unix:///run/redis.sock":   "unix:///run/redis.sock",
		"valkey://h:1":             "valkey://h:1",
		"redis://h:1?addr=h2:2":    "redis://h:1?addr=h2:2",
		"redis://[::1]:6379/0":     "redis://[::1]:6379/0",
		"rediss://u:p%40ss@h:6380": "rediss://u:p%40ss@h:6380",
	} {
		got, err := URL(in)
		if err != nil || got != want {
			t.Errorf("URL(%q) = %q, %v; want %q", in, got, err, want)
		}
		if _, err := rueidis.ParseURL(got); err != nil {
			t.Errorf("URL(%q) = %q: %v", in, got, err)
		}
	}
	for in, want := range map[string]string{
		"":                "empty address; want host:port or redis://host:port",
		"http://x:1":      "not a redis://, rediss:// or unix:// URL; want host:port or redis://host:port",
		"tcp://x:1":       "not a redis://, rediss:// or unix:// URL",
		"::1":             "an IPv6 address needs brackets: want [::1]:port",
		"fe80::1:6379":    "an IPv6 address needs brackets",
		"h:0":             `port "0" is not a number from 1 to 65535`,
		"h:65536":         `port "65536" is not a number from 1 to 65535`,
		"h:redis":         `port "redis" is not a number from 1 to 65535`,
		"h:":              `port "" is not a number`,
		":6379":           "not a host name or address",
		"a b:1":           "not a host name or address",
		"h:1:2":           "not host:port",
		"[::1]x":          "not host:port",
		"/run/redis.sock": "a socket path needs a URL: want unix://PATH",
		"u:secret@h:1":    "credentials need a URL: want redis://USER:PASSWORD@host:port",
	} {
		got, err := URL(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("URL(%q) = %q, %v; want an error with %q", in, got, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("URL(%q): the error repeats the password: %v", in, err)
		}
	}
}

// TestRedact: the password goes, whatever the address looks like.
func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"redis://u:secret@h:1":         "redis://u:xxxxx@h:1",
		"redis://:secret@h:1":          "redis://:xxxxx@h:1",
		"rediss://u:se@cr:et@h:1/0":    "rediss://u:xxxxx@h:1/0",
		"redis://u:sec/ret@h:1":        "redis://u:xxxxx@h:1",
		"redis://u:s%20t@h:1":          "redis://u:xxxxx@h:1",
		"u:secret@h:1":                 "u:xxxxx@h:1",
		"unix://u:secret@/run/r.sock":  "unix://u:xxxxx@/run/r.sock",
		"redis://user@h:1":             "redis://user@h:1",
		"redis://h:1":                  "redis://h:1",
		"h:1":                          "h:1",
		"[::1]:1":                      "[::1]:1",
		"redis://u:a b@h:1?x=1":        "redis://u:xxxxx@h:1?x=1",
		"redis://u:secret@h:1?db=a@b":  "redis://u:xxxxx@b",
		"http://u:secret@example.com/": "http://u:xxxxx@example.com/",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
	msg := Scrub("dial redis://u:p%40ss@h: WRONGPASS p%40ss p@ss", "redis://u:p%40ss@h")
	if strings.Contains(msg, "p%40ss") || strings.Contains(msg, "p@ss") {
		t.Errorf("scrub left the password: %q", msg)
	}
}
