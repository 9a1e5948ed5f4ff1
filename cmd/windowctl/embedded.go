package main

import (
	"bufio"
	"bytes"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
)

// pfcountUnion is the key where the embedded server merges the keys of a
// PFCOUNT of several (see embeddedServer).
const pfcountUnion = "windowctl-embedded:pfcount-union"

// embeddedServer starts the demo's in-process server: miniredis, with one
// command made to answer as Redis does. PFCOUNT of several keys answers the
// cardinality of their union in Redis, and in miniredis the sum of each
// key's count, which would count a member of two buckets of a distinct count
// twice. So a PFCOUNT of several keys runs as PFMERGE into a key of its own,
// PFCOUNT of that key, and DEL. The store sends it from scripts, which run
// one at a time, so no two such PFCOUNTs share that key at once.
func embeddedServer() (*miniredis.Miniredis, error) {
	mr, err := miniredis.Run()
	if err != nil {
		return nil, err
	}
	srv := mr.Server()
	srv.SetPreHook(func(c *server.Peer, cmd string, args ...string) bool {
		if cmd != "PFCOUNT" || len(args) < 2 {
			return false
		}
		var buf bytes.Buffer
		w := bufio.NewWriter(&buf)
		sink := server.NewPeer(w)
		sink.Ctx = c.Ctx
		srv.Dispatch(sink, append([]string{"PFMERGE", pfcountUnion}, args...))
		_ = w.Flush()
		if _, err := server.ParseReply(bufio.NewReader(&buf)); err != nil {
			c.WriteError(err.Error()) // a key that is not a HyperLogLog, as PFCOUNT says it
			return true
		}
		srv.Dispatch(c, []string{"PFCOUNT", pfcountUnion})
		srv.Dispatch(sink, []string{"DEL", pfcountUnion})
		return true
	})
	return mr, nil
}
