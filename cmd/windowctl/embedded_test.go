package main

import (
	"context"
	"testing"

	"github.com/redis/rueidis"
)

// TestEmbeddedPFCount: the embedded server's PFCOUNT of several keys is the
// cardinality of their union, as Redis's, in a script too; it leaves no key
// behind, and a key of another type fails it as in Redis.
func TestEmbeddedPFCount(t *testing.T) {
	mr, err := embeddedServer()
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Close()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mr.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	do := func(args ...string) rueidis.RedisResult { return c.Do(ctx, c.B().Arbitrary(args...).Build()) }
	do("PFADD", "a", "x")
	do("PFADD", "b", "x", "y")
	do("SET", "s", "v")
	for _, q := range [][]string{{"PFCOUNT", "a", "b"}, {"EVAL", "return redis.call('PFCOUNT', KEYS[1], KEYS[2])", "2", "a", "b"}} {
		if n, err := do(q...).AsInt64(); err != nil || n != 2 {
			t.Errorf("%v = %d, %v; want 2, the union's", q, n, err)
		}
	}
	if n, err := do("PFCOUNT", "b").AsInt64(); err != nil || n != 2 {
		t.Errorf("PFCOUNT b = %d, %v", n, err)
	}
	if err := do("PFCOUNT", "a", "s").Error(); err == nil {
		t.Error("PFCOUNT of a string key succeeded")
	}
	if mr.Exists(pfcountUnion) {
		t.Error("the union's key was left behind")
	}
}
