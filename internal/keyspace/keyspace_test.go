package keyspace

import (
	"errors"
	"strings"
	"testing"
)

func TestName(t *testing.T) {
	s, err := New("ws:")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ key, want string }{
		{"user:42", "ws:{user:42}:1m/1s"},
		{"203.0.113.9", "ws:{203.0.113.9}:1m/1s"},
		{"2001:db8::1", "ws:{2001:db8::1}:1m/1s"},
		{"{user42}", "ws:{%7Buser42%7D}:1m/1s"},
		{"a b", "ws:{a%20b}:1m/1s"},
		{"100%", "ws:{100%25}:1m/1s"},
		{"\xff\x00", "ws:{%FF%00}:1m/1s"},
		{"é", "ws:{%C3%A9}:1m/1s"},
	}
	for _, tt := range tests {
		got, err := s.Name(tt.key, ":1m/1s")
		if err != nil || got != tt.want {
			t.Errorf("Name(%q) = %q, %v; want %q", tt.key, got, err, tt.want)
		}
		body := strings.TrimSuffix(strings.TrimPrefix(got, "ws:{"), "}:1m/1s")
		if back, err := Unescape(body); err != nil || back != tt.key {
			t.Errorf("Unescape(%q) = %q, %v", body, back, err)
		}
	}
	got, err := s.Entity("user{42}").Name("logins", ":1m/1s")
	if err != nil || got != "ws:{user%7B42%7D}:logins:1m/1s" {
		t.Fatalf("entity key = %q, %v", got, err)
	}
	for _, tc := range []struct {
		sp   Space
		key  string
		want string
	}{
		{s, "", "keyspace: invalid key: empty key"},
		{s, strings.Repeat("x", MaxKeyLen+1), "keyspace: invalid key: key of 1025 bytes is longer than 1024"},
		{s.Entity(""), "x", "keyspace: invalid key: entity: empty key"},
	} {
		_, err := tc.sp.Name(tc.key, "")
		if !errors.Is(err, ErrInvalid) || err.Error() != tc.want {
			t.Errorf("Name(%d bytes) = %v, want %q", len(tc.key), err, tc.want)
		}
	}
	if _, err := New("a{b"); !errors.Is(err, ErrInvalid) {
		t.Fatal("a prefix with a brace was accepted")
	}
	for _, bad := range []string{"%", "%4", "%GG", "%41", "a b", "{", "\xff"} {
		if _, err := Unescape(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("Unescape(%q) accepted", bad)
		}
	}
}

// TestSlot checks the slot function against values Redis Cluster gives
// (CLUSTER KEYSLOT), and the hash tag rules.
func TestSlot(t *testing.T) {
	for key, want := range map[string]uint16{
		"foo": 12182, "bar": 5061, "123456789": 12739, // CRC16/XMODEM("123456789") = 0x31C3
		"{user1000}.following": Slot("user1000"), "foo{}{bar}": Slot("foo{}{bar}"), "foo{{bar}}zap": Slot("{bar"),
		"foo{bar}{zap}": Slot("bar"),
	} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
	if crc16("123456789") != 0x31C3 {
		t.Fatal("crc16 check value")
	}
}

// FuzzName: key building is injective, never lets a user's brace through,
// round trips, keeps entity views apart from plain keys, and tags every key
// with exactly the escaped key or entity.
func FuzzName(f *testing.F) {
	for _, s := range []string{"a", "{a}", "a}b{", "%7B", "ws:x", "\x00", "é", "a:b"} {
		f.Add(s, s+"x", "e")
	}
	s, _ := New("p:")
	f.Fuzz(func(t *testing.T, a, b, entity string) {
		ka, errA := s.Name(a, ":S")
		kb, errB := s.Name(b, ":S")
		if errA != nil || errB != nil {
			if (errA == nil) != (Check(a) == nil) || (errB == nil) != (Check(b) == nil) {
				t.Fatalf("errors disagree with Check: %v %v", errA, errB)
			}
			return
		}
		if (a == b) != (ka == kb) {
			t.Fatalf("Name(%q) = %q, Name(%q) = %q", a, ka, b, kb)
		}
		open, end := strings.IndexByte(ka, '{'), strings.IndexByte(ka, '}')
		if open != 2 || end != len(ka)-3 || strings.Count(ka, "{") != 1 || strings.Count(ka, "}") != 1 {
			t.Fatalf("a user's brace reached Redis, or the tag moved: %q", ka)
		}
		if back, err := Unescape(ka[open+1 : end]); err != nil || back != a {
			t.Fatalf("round trip %q -> %q -> %q, %v", a, ka, back, err)
		}
		if Check(entity) != nil {
			return
		}
		te, err := s.Entity(entity).Name(a, ":S")
		if err != nil {
			t.Fatal(err)
		}
		if te == ka || te == kb {
			t.Fatalf("entity key %q collides with a plain one", te)
		}
		var want strings.Builder
		Escape(&want, entity)
		open, end = strings.IndexByte(te, '{'), strings.IndexByte(te, '}')
		if open != 2 || te[open+1:end] != want.String() || Slot(te) != Slot(want.String()) {
			t.Fatalf("tag of %q is %q", te, te[open+1:end])
		}
	})
}
