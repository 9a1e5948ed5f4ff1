package tests

import (
	"fmt"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/tests/harness"
)

// TestExampleServer runs examples/apiserver as a process against a real Redis
// and talks to it with a real HTTP client.
func TestExampleServer(t *testing.T) {
	t.Parallel()
	srv := harness.Fresh(t, harness.Redis70) // the example's keys are fixed ("api:..."): a server of its own
	// The example binds port 0 itself and logs the port it took: a port
	// chosen here and closed before the example binds it could be taken by
	// another test's server in between.
	cmd := exec.Command(harness.Binary(t, "./examples/apiserver"), "--addr", srv.URL(), "--listen", "127.0.0.1:0")
	logs := &syncBuffer{}
	cmd.Stderr = logs
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	listening := regexp.MustCompile(`apiserver: listening on (127\.0\.0\.1:\d+)`)
	var addr string
	require.Eventually(t, func() bool {
		m := listening.FindStringSubmatch(logs.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	}, 30*time.Second, 50*time.Millisecond, "the example server did not start: %s", logs)
	base := "http://" + addr

	for i := 0; i < 5; i++ {
		resp := get(t, base+"/hello", nil)
		require.Equal(t, 200, resp.StatusCode)
		require.Equal(t, strconv.Itoa(4-i), resp.Header.Get("X-RateLimit-Remaining"))
		require.Equal(t, "per10s;q=5;w=10, perhour;q=100;w=3600", resp.Header.Get("RateLimit-Policy"))
	}
	resp := get(t, base+"/hello", nil)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	require.Regexp(t, `^per10s;r=0;t=\d+$`, resp.Header.Get("RateLimit"))

	login := func(user string) int {
		req, err := http.NewRequest("POST", base+"/login", nil)
		require.NoError(t, err)
		if user != "" {
			req.Header.Set("X-User", user)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := 0; i < 3; i++ {
		require.Equal(t, 200, login("alice"))
	}
	require.Equal(t, http.StatusTooManyRequests, login("alice"))
	require.Equal(t, 200, login("bob"))
	require.Equal(t, http.StatusBadRequest, login(""), "no X-User: a client error, not an outage")

	for i := 0; i < 10; i++ {
		require.Equal(t, 200, get(t, base+"/users/42", nil).StatusCode, fmt.Sprint(i))
	}
	require.Equal(t, http.StatusTooManyRequests, get(t, base+"/users/42", nil).StatusCode)
	require.Equal(t, 200, get(t, base+"/users/7", nil).StatusCode)
}
