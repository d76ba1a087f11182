package etcdproc

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fencekit/fencekit/internal/proc"
)

// processRunner runs members as processes of bin.
type processRunner struct{ bin string }

// processServer is a member's etcd process.
type processServer struct {
	p          *proc.Process
	metricsURL string
}

// Launch starts s's etcd process.
func (r processRunner) Launch(s Spec) (Server, error) {
	p, err := proc.Start(proc.Spec{
		Name: s.Name, Binary: r.bin, Args: args(s), Env: environ(), LogFile: s.LogFile,
	})
	if err != nil {
		return nil, err
	}
	return &processServer{p: p, metricsURL: s.MetricsURL}, nil
}

// args are the command line of s's etcd.
func args(s Spec) []string {
	a := []string{
		"--name=" + s.Name,
		"--data-dir=" + s.DataDir,
		"--listen-client-urls=" + s.ClientURL,
		"--advertise-client-urls=" + s.ClientURL,
		"--listen-peer-urls=" + s.PeerURL,
		"--initial-advertise-peer-urls=" + s.PeerURL,
		"--listen-metrics-urls=" + s.MetricsURL,
		"--initial-cluster=" + s.InitialCluster,
		"--initial-cluster-token=" + s.Token,
		"--initial-cluster-state=" + s.State,
		"--heartbeat-interval=" + strconv.Itoa(int(s.TickInterval/time.Millisecond)),
		"--election-timeout=" + strconv.Itoa(int(s.ElectionTimeout/time.Millisecond)),
		"--log-level=warn",
	}
	if s.NoFsync {
		a = append(a, "--unsafe-no-fsync")
	}
	if cs := s.Certs; cs != nil {
		a = append(a,
			"--cert-file="+cs.CertFile, "--key-file="+cs.KeyFile, "--trusted-ca-file="+cs.CAFile, "--client-cert-auth",
			"--peer-cert-file="+cs.CertFile, "--peer-key-file="+cs.KeyFile, "--peer-trusted-ca-file="+cs.CAFile, "--peer-client-cert-auth")
	}
	return append(a, s.Flags...)
}

// environ is this process's environment without etcd's ETCD_ variables,
// which would override or conflict with the flags.
func environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCD_") {
			env = append(env, kv)
		}
	}
	return env
}

// healthLine drops the lines of /health checks from a log's tail (a start
// that waits for a leader writes two every 10 ms, which would hide why
// there is none).
func healthLine(line string) bool { return strings.Contains(line, "/health") }

// Ready waits until the process's /health reports healthy, or it exits,
// or ctx ends.
func (s *processServer) Ready(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if body, err := get(ctx, s.metricsURL+"/health"); err == nil && strings.Contains(body, `"health":"true"`) {
			return nil
		}
		select {
		case <-s.p.Done():
			return s.p.ExitError(healthLine)
		case <-ctx.Done():
			return s.p.NotReady(ctx.Err(), healthLine)
		case <-t.C:
		}
	}
}

func (s *processServer) Exited() bool           { return s.p.Exited() }
func (s *processServer) Stop()                  { s.p.Stop(StopTimeout) }
func (s *processServer) Kill()                  { s.p.Kill() }
func (s *processServer) Pause(pause bool) error { return s.p.Pause(pause) }
func (s *processServer) PID() int               { return s.p.PID() }

// Status reads the leadership from the process's metrics.
func (s *processServer) Status(ctx context.Context) (Status, error) {
	ms, err := scrape(ctx, s.metricsURL, "etcd_server_has_leader", "etcd_server_is_leader")
	if err != nil {
		return Status{}, err
	}
	return Status{HasLeader: ms["etcd_server_has_leader"] == 1, IsLeader: ms["etcd_server_is_leader"] == 1}, nil
}

// httpClient reads metrics and health; a paused member must not block it,
// and no idle connection outlives a request (tests check for leaks).
var httpClient = &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

func get(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// readMetrics reads the named metrics of m; see scrape.
func readMetrics(ctx context.Context, m *Member, names ...string) (map[string]float64, error) {
	ms, err := scrape(ctx, m.metricsURL, names...)
	if err != nil {
		return nil, fmt.Errorf("etcdproc: metrics of %s: %w", m.name, err)
	}
	return ms, nil
}

// scrape reads the named metrics from base's /metrics: each one's value
// summed over its series.
func scrape(ctx context.Context, base string, names ...string) (map[string]float64, error) {
	body, err := get(ctx, base+"/metrics")
	if err != nil {
		return nil, err
	}
	out := make(map[string]float64, len(names))
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		for _, name := range names {
			if v, ok := sample(sc.Text(), name); ok {
				out[name] += v
			}
		}
	}
	return out, sc.Err()
}

// sample returns the value of line when it is a sample of the metric name.
func sample(line, name string) (float64, bool) {
	rest, ok := strings.CutPrefix(line, name)
	if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
		return 0, false
	}
	fields := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
	if len(fields) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	return v, err == nil
}
