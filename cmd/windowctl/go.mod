module github.com/windowstore/windowstore/cmd/windowctl

go 1.26.0

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/redis/rueidis v1.0.79
	github.com/windowstore/windowstore v0.0.0
)

require (
	github.com/yuin/gopher-lua v1.1.1 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

replace github.com/windowstore/windowstore => ../..
