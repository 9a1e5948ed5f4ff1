// Package resptest gives unit tests a rueidis client whose connection is
// answered by a function in the test, over an in-memory pipe, and records
// every command the client sends. It checks command tokens without a server,
// as rueidis's own tests do; it proves the wire format, never that a backend
// works (the integration suite does that on real servers).
package resptest

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/rueidis"
)

// Reply answers one command with a raw RESP3 reply, such as ":1\r\n". The
// helpers Int, Str, Err, Nil and Arr build replies.
type Reply func(cmd []string) string

// Conn records the commands a client sent.
type Conn struct {
	mu   sync.Mutex
	cmds [][]string
}

// Commands returns the commands sent so far, handshake excluded.
func (c *Conn) Commands() [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]string(nil), c.cmds...)
}

// Client returns a client whose every connection is answered by reply, and
// the record of what it sent. The client is closed when the test ends.
func Client(t testing.TB, reply Reply) (rueidis.Client, *Conn) {
	t.Helper()
	rec := &Conn{}
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:       []string{"resptest:6379"},
		DisableCache:      true,
		ForceSingleClient: true,
		DialCtxFn: func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) {
			a, b := net.Pipe()
			go serve(b, reply, rec)
			return a, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, rec
}

func serve(conn net.Conn, reply Reply, rec *Conn) {
	defer conn.Close()
	r := bufio.NewReader(conn)
	for {
		cmd, err := readCommand(r)
		if err != nil {
			return
		}
		var out string
		switch strings.ToUpper(cmd[0]) {
		case "HELLO":
			out = "%3\r\n+server\r\n+redis\r\n+proto\r\n:3\r\n+mode\r\n+standalone\r\n"
		case "CLIENT":
			out = "+OK\r\n"
		case "PING":
			out = "+PONG\r\n"
		default:
			rec.mu.Lock()
			rec.cmds = append(rec.cmds, cmd)
			rec.mu.Unlock()
			if reply == nil {
				out = Err("ERR resptest: no reply for " + cmd[0])
			} else {
				out = reply(cmd)
			}
		}
		if _, err := io.WriteString(conn, out); err != nil {
			return
		}
	}
}

// readCommand reads one RESP array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[0] != '*' {
		return nil, fmt.Errorf("resptest: not an array: %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil {
		return nil, err
	}
	cmd := make([]string, n)
	for i := range cmd {
		hdr, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(hdr[1:]))
		if err != nil {
			return nil, err
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		cmd[i] = string(buf[:size])
	}
	return cmd, nil
}

// Int is an integer reply.
func Int(n int64) string { return ":" + strconv.FormatInt(n, 10) + "\r\n" }

// Str is a bulk string reply.
func Str(s string) string { return "$" + strconv.Itoa(len(s)) + "\r\n" + s + "\r\n" }

// Err is an error reply.
func Err(msg string) string { return "-" + msg + "\r\n" }

// Nil is a null reply.
func Nil() string { return "_\r\n" }

// Arr is an array reply of other replies.
func Arr(items ...string) string {
	return "*" + strconv.Itoa(len(items)) + "\r\n" + strings.Join(items, "")
}
