package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
)

// Label marks every container the harness starts; scripts/test.sh removes
// the containers that carry it when it exits.
const Label = "windowstore.test"

// RunLabel marks the containers of one run of scripts/test.sh, with the value
// of WINDOWSTORE_RUN_ID: the script removes its own run's containers, not
// another run's.
const RunLabel = "windowstore.run"

func labels() map[string]string {
	l := map[string]string{Label: "true"}
	if id := os.Getenv("WINDOWSTORE_RUN_ID"); id != "" {
		l[RunLabel] = id
	}
	return l
}

// startAttempts is how many ports a server is tried on before its start is a
// failure (another process may take a free port before the server binds it).
const startAttempts = 4

// readyTimeout bounds one start of a server, from the container's start to
// its "Ready to accept connections" line.
const readyTimeout = 30 * time.Second

var (
	dockerOnce sync.Once
	dockerCli  *testcontainers.DockerClient
	dockerWhy  string // why Docker is not usable; empty when it is
)

// docker returns testcontainers' Docker client, or why there is none.
func docker() (*testcontainers.DockerClient, string) {
	dockerOnce.Do(func() {
		if os.Getenv("WINDOWSTORE_VERBOSE") == "" {
			tclog.SetDefault(tclog.NewNoopLogger())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		c, err := testcontainers.NewDockerClientWithOpts(ctx)
		if err != nil {
			dockerWhy = fmt.Sprintf("no usable Docker engine (%v): start one (for example `sudo systemctl start docker`), or run ./scripts/test.sh, which checks for it first", err)
			return
		}
		if _, err := c.Ping(ctx, client.PingOptions{}); err != nil {
			dockerWhy = fmt.Sprintf("the Docker engine does not answer (%v)", err)
			_ = c.Close()
			return
		}
		dockerCli = c
	})
	return dockerCli, dockerWhy
}

var (
	imageMu sync.Mutex
	images  = map[string]string{} // image -> why it cannot be had ("" when present)
)

// ensureImage makes sure image is present locally, pulling it if it is not.
// It returns why it cannot be had, or "".
func ensureImage(image string) string {
	imageMu.Lock()
	defer imageMu.Unlock()
	if why, ok := images[image]; ok {
		return why
	}
	c, why := docker()
	if c == nil {
		return why
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := c.ImageInspect(ctx, image); err != nil {
		r, err := c.ImagePull(ctx, image, client.ImagePullOptions{})
		if err == nil {
			_, err = io.Copy(io.Discard, r)
			r.Close()
		}
		if err == nil {
			_, err = c.ImageInspect(ctx, image)
		}
		if err != nil {
			why = fmt.Sprintf("image %s is not present and cannot be pulled (%v); ./scripts/test.sh builds local images when no *_IMAGE is set", image, err)
		}
	}
	images[image] = why
	return why
}

// unavailable is a start error that no retry can fix: no Docker engine, no image.
type unavailable struct{ why string }

func (u unavailable) Error() string { return u.why }

// freePort returns a TCP port that nothing listens on at the moment. Another
// process may take it before the server does: callers retry on a new port.
func freePort(avoid ...int) (int, error) {
	for {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			return 0, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		clash := false
		for _, a := range avoid {
			clash = clash || a == p
		}
		if !clash {
			return p, nil
		}
	}
}

// ctrRef is one server container on the host's network.
type ctrRef struct {
	id     string
	starts int // how many times it has been started
}

// launch starts a server container on the host's network, on a free loopback
// port, and waits until it accepts connections. cmd builds the server's
// command line for a port (and, where extra ports are asked for, more). It
// retries on new ports when the server does not come up; after startAttempts
// it returns the last error.
func launch(image string, files map[string]string, extraPorts int, cmd func(ports []int) []string) (*ctrRef, []int, error) {
	if why := ensureImage(image); why != "" {
		return nil, nil, unavailable{why}
	}
	var last error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		var ports []int
		for len(ports) < 1+extraPorts {
			p, err := freePort(ports...)
			if err != nil {
				return nil, nil, err
			}
			ports = append(ports, p)
		}
		c, err := runContainer(image, files, cmd(ports))
		if err == nil {
			return c, ports, nil
		}
		last = fmt.Errorf("attempt %d on port %d: %w", attempt, ports[0], err)
	}
	return nil, nil, fmt.Errorf("the server did not start after %d attempts: %w", startAttempts, last)
}

func runContainer(image string, files map[string]string, cmd []string) (*ctrRef, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var cfs []testcontainers.ContainerFile
	for host, in := range files {
		cfs = append(cfs, testcontainers.ContainerFile{HostFilePath: host, ContainerFilePath: in, FileMode: 0o644})
	}
	ctr, err := testcontainers.Run(ctx, image,
		testcontainers.WithCmd(cmd...),
		testcontainers.WithFiles(cfs...),
		testcontainers.WithLabels(labels()),
		// The host's network: the server's own port is the host's. (testcontainers
		// still records the image's EXPOSE 6379 as a binding; the engine ignores
		// port bindings on the host's network.)
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) { hc.NetworkMode = "host" }),
	)
	if ctr == nil {
		return nil, fmt.Errorf("docker run %s: %w", image, err)
	}
	c := &ctrRef{id: ctr.GetContainerID(), starts: 1}
	if err != nil {
		c.remove()
		return nil, fmt.Errorf("docker run %s: %w", image, err)
	}
	if err := c.waitReady(); err != nil {
		c.remove()
		return nil, err
	}
	return c, nil
}

// logs returns the container's output (stdout and stderr).
func (c *ctrRef) logs(ctx context.Context) (string, error) {
	d, _ := docker()
	r, err := d.ContainerLogs(ctx, c.id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return "", err
	}
	defer r.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, r); err != nil {
		return out.String(), err
	}
	return out.String(), nil
}

// running tells whether the container's process runs, and its exit code if not.
func (c *ctrRef) running(ctx context.Context) (bool, int, error) {
	d, _ := docker()
	r, err := d.ContainerInspect(ctx, c.id, client.ContainerInspectOptions{})
	if err != nil {
		return false, 0, err
	}
	st := r.Container.State
	if st == nil {
		return false, 0, errors.New("no state")
	}
	return st.Running, st.ExitCode, nil
}

// waitReady waits until the server has said "Ready to accept connections" as
// many times as the container has been started, or fails when the
// container's process ends first (a port that is taken) or after readyTimeout.
func (c *ctrRef) waitReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for {
		out, err := c.logs(ctx)
		if err == nil && strings.Count(out, "Ready to accept connections") >= c.starts {
			return nil
		}
		up, code, ierr := c.running(ctx)
		if ierr == nil && !up {
			return fmt.Errorf("the server exited with status %d:\n%s", code, tail(out, 8))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the server was not ready within %v:\n%s", readyTimeout, tail(out, 8))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}

// kill sends SIGKILL to the server (through the Docker API) and waits until
// its process is gone.
func (c *ctrRef) kill() error {
	d, _ := docker()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := d.ContainerKill(ctx, c.id, client.ContainerKillOptions{Signal: "SIGKILL"}); err != nil {
		return fmt.Errorf("kill: %w", err)
	}
	for {
		up, _, err := c.running(ctx)
		if err != nil {
			return err
		}
		if !up {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("kill: the container still runs")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// signal sends sig (such as SIGSTOP or SIGCONT) to the server, through the
// Docker API.
func (c *ctrRef) signal(sig string) error {
	d, _ := docker()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := d.ContainerKill(ctx, c.id, client.ContainerKillOptions{Signal: sig})
	return err
}

// start starts a stopped container again (same command, same port) and waits
// until the server is ready.
func (c *ctrRef) start() error {
	d, _ := docker()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := d.ContainerStart(ctx, c.id, client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	c.starts++
	return c.waitReady()
}

// remove kills and removes the container.
func (c *ctrRef) remove() {
	d, _ := docker()
	if d == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = d.ContainerRemove(ctx, c.id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
}
