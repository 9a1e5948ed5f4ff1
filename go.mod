module github.com/windowstore/windowstore

go 1.26.0

require github.com/redis/rueidis v1.0.79

require (
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)
