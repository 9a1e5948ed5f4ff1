package store

import (
	"strings"
	"testing"
)

func TestRedisKeyEscaping(t *testing.T) {
	s := &Store{prefix: "ws:"}
	tests := []struct{ key, want string }{
		{"user:42", "ws:user:42"},
		{"203.0.113.9", "ws:203.0.113.9"},
		{"2001:db8::1", "ws:2001:db8::1"},
		{"{user42}", "ws:%7Buser42%7D"},
		{"a b", "ws:a%20b"},
		{"100%", "ws:100%25"},
		{"\xff\x00", "ws:%FF%00"},
		{"é", "ws:%C3%A9"},
	}
	for _, tt := range tests {
		got, err := s.RedisKey(tt.key)
		if err != nil || got != tt.want {
			t.Errorf("RedisKey(%q) = %q, %v; want %q", tt.key, got, err, tt.want)
		}
		back, err := UnescapeKey(strings.TrimPrefix(got, "ws:"))
		if err != nil || back != tt.key {
			t.Errorf("UnescapeKey(%q) = %q, %v", got, back, err)
		}
	}
	e := s.Entity("user{42}")
	got, err := e.RedisKey("logins")
	if err != nil || got != "ws:{user%7B42%7D}:logins" {
		t.Fatalf("entity key = %q, %v", got, err)
	}
	if _, err := s.Entity("").RedisKey("x"); err == nil {
		t.Fatal("empty entity accepted")
	}
	for _, bad := range []string{"%", "%4", "%GG", "%41", "a b", "{", "\xff"} {
		if _, err := UnescapeKey(bad); err == nil {
			t.Errorf("UnescapeKey(%q) accepted", bad)
		}
	}
}

// FuzzRedisKey: key building is injective, never lets a brace through, round
// trips, and keeps tagged and untagged keys apart.
func FuzzRedisKey(f *testing.F) {
	for _, s := range []string{"a", "{a}", "a}b{", "%7B", "ws:x", "\x00", "é", "a:b"} {
		f.Add(s, s+"x", "e")
	}
	s := &Store{prefix: "p:"}
	f.Fuzz(func(t *testing.T, a, b, entity string) {
		ka, errA := s.RedisKey(a)
		kb, errB := s.RedisKey(b)
		if errA != nil || errB != nil {
			if (errA == nil) != (CheckKey(a) == nil) || (errB == nil) != (CheckKey(b) == nil) {
				t.Fatalf("errors disagree with CheckKey: %v %v", errA, errB)
			}
			return
		}
		if (a == b) != (ka == kb) {
			t.Fatalf("RedisKey(%q) = %q, RedisKey(%q) = %q", a, ka, b, kb)
		}
		if strings.ContainsAny(ka[2:], "{}") {
			t.Fatalf("brace reached Redis: %q", ka)
		}
		if back, err := UnescapeKey(ka[2:]); err != nil || back != a {
			t.Fatalf("round trip %q -> %q -> %q, %v", a, ka, back, err)
		}
		if CheckKey(entity) != nil {
			return
		}
		te, err := s.Entity(entity).RedisKey(a)
		if err != nil {
			t.Fatal(err)
		}
		if te == ka || te == kb {
			t.Fatalf("tagged %q collides with untagged", te)
		}
		// The hash tag is exactly the escaped entity: the first { to the first }.
		open, end := strings.IndexByte(te, '{'), strings.IndexByte(te, '}')
		var want strings.Builder
		escapeKey(&want, entity)
		if open != 2 || te[open+1:end] != want.String() {
			t.Fatalf("tag of %q is %q", te, te[open+1:end])
		}
	})
}
