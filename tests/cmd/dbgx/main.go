package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/internal/hook"
	"github.com/windowstore/windowstore/store"
)

func main() {
	ctx := context.Background()
	c, _ := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:26399"}})
	var st []*store.Store
	for _, sc := range []time.Duration{1, 10, 100} {
		s, err := store.New(ctx, c, store.Window{Length: 10 * sc * time.Second, Bucket: sc * time.Second}, store.WithPrefix("dbg:"), hook.WithTrace("x", false).(store.Option))
		if err != nil {
			panic(err)
		}
		st = append(st, s)
	}
	at := time.Now()
	for i := 0; i < 3; i++ {
		d, err := store.AllowAll(ctx, 1, store.Policy{Store: st[0].At(at), Key: "k", Limit: 1 << 40}, store.Policy{Store: st[1].At(at), Key: "k", Limit: 1 << 40}, store.Policy{Store: st[2].At(at), Key: "k", Limit: 1 << 40})
		fmt.Println(d.Allowed, d.Sum, err)
		p, err := hook.Paths(ctx, st[0], "x")
		fmt.Println(p, err)
	}
}
