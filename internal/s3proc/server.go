package s3proc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// The fixed credentials of every test server, and the region its clients
// sign for.
const (
	AccessKey = "fencekit-test"
	SecretKey = "fencekit-test-secret-key"
	Region    = "us-east-1"
)

// StartTimeout bounds how long Start waits for the server to answer.
const StartTimeout = 20 * time.Second

// Server is a running versitygw process.
type Server struct {
	// Endpoint is the server's URL, http://127.0.0.1:port.
	Endpoint string
	// Dir is the directory the posix backend keeps buckets in.
	Dir string
	// Started is how long the process took to answer.
	Started time.Duration

	cmd  *exec.Cmd
	logf *os.File
}

// Start runs bin (from Built) with the posix backend in dir, on a free
// 127.0.0.1 port, with AccessKey and SecretKey, and waits until it answers
// HTTP. Its output goes to dir/versitygw.log; the backend's buckets live
// in dir/data. Stop it with Stop.
func Start(ctx context.Context, bin, dir string) (*Server, error) {
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, fmt.Errorf("s3proc: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "versitygw.log"))
	if err != nil {
		return nil, fmt.Errorf("s3proc: %w", err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(bin, "--access", AccessKey, "--secret", SecretKey,
		"--region", Region, "--port", addr, "posix", data)
	cmd.Stdout, cmd.Stderr = logf, logf
	start := time.Now()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("s3proc: start %s: %w", bin, err)
	}
	s := &Server{Endpoint: "http://" + addr, Dir: data, cmd: cmd, logf: logf}
	if err := s.wait(ctx); err != nil {
		s.Stop()
		log, _ := os.ReadFile(logf.Name())
		return nil, fmt.Errorf("s3proc: versitygw on %s did not answer: %w\n%s", addr, err, log)
	}
	s.Started = time.Since(start)
	return s, nil
}

// wait polls the server until it answers any HTTP response.
func (s *Server) wait(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	cli := &http.Client{Timeout: time.Second}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.Endpoint, nil)
		if err != nil {
			return err
		}
		resp, err := cli.Do(req)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// PID returns the server's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Stop kills the server by its PID and waits for it to exit. It is safe
// to call more than once.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
	s.logf.Close()
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("s3proc: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
