module github.com/windowstore/windowstore/internal/luacheck

go 1.26.0

require (
	github.com/windowstore/windowstore v0.0.0
	github.com/yuin/gopher-lua v1.1.1
)

require (
	github.com/redis/rueidis v1.0.79 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

replace github.com/windowstore/windowstore => ../..
