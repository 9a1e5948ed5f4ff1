// Command hostnet is scripts/test.sh's probe of host networking: run in a
// container on the host's network, it listens on 127.0.0.1:PORT and answers
// "+PONG" to whatever it reads, as a Redis server answers PING; the script
// then connects to it from the host. It is a static binary in an image of its
// own (built in seconds with Go and `docker import`), so that the check needs
// no server image and runs before any image is built.
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: hostnet PORT")
		os.Exit(2)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", os.Args[1]))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	time.AfterFunc(time.Minute, func() { os.Exit(0) }) // never outlive the check
	for {
		c, err := l.Accept()
		if err != nil {
			continue
		}
		go func() {
			defer c.Close()
			if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
				_, _ = c.Write([]byte("+PONG\r\n"))
			}
		}()
	}
}
