// Package limitlua holds the scripts of package limit's server-side
// limiters (the log, the fixed window, GCRA and the windows) and the ACL
// rules each needs, so that the tests can check them as they check the
// backends'.
package limitlua

import (
	"embed"

	"github.com/windowstore/windowstore/internal/backend"
)

//go:embed lua/*.lua
var lua embed.FS

func script(name string) *backend.Script {
	return backend.NewScript("limit "+name, false, backend.BaseLua, backend.Embedded(lua, "internal/limitlua", name+".lua"))
}

// The limiters' scripts.
var (
	Log     = script("log")
	Fixed   = script("fixed")
	GCRA    = script("gcra")
	Windows = script("windows")
	// The scripts as one Functions library: a limiter runs FCALL, which
	// skips the shared definitions EVALSHA runs on every call, and falls
	// back to EVALSHA where functions are refused (see backend.Runner).
	_ = backend.NewLibrary("ws_limit", Log, Fixed, GCRA, Windows)
)

// Scripts returns every limiter's script.
func Scripts() []*backend.Script { return []*backend.Script{Log, Fixed, GCRA, Windows} }

// ACL holds the least ACL rules each limiter needs: its keys, the
// connection's handshake and detection, EVALSHA (FCALL and FUNCTION LOAD come
// with the store's optional "functions" rule), and the commands its script
// calls (docs/acl.md documents them; the tests check them both ways).
var ACL = []backend.ACLRule{
	{Label: "log", Rule: "~rl:* -@all +hello +ping +command|info +evalsha +eval +time +zcount +zremrangebyscore +zadd +zrange +pexpireat"},
	{Label: "fixed window", Rule: "~rl:* -@all +hello +ping +command|info +evalsha +eval +time +hmget +hset +hincrby +pexpireat"},
	{Label: "gcra", Rule: "~rl:* -@all +hello +ping +command|info +evalsha +eval +time +get +set +del"},
	{Label: "windows", Rule: "~rl:* -@all +hello +ping +command|info +evalsha +eval +time +hmget +hset +hdel +hgetall +pexpireat +del"},
}
