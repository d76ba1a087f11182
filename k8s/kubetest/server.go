package kubetest

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencekit/fencekit/internal/etcdproc"
	"github.com/fencekit/fencekit/internal/proc"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Identities in every Server's token file.
const (
	// AdminUser is a member of system:masters: every request is allowed
	// (Server.AdminConfig).
	AdminUser = "fencekit-admin"
	// StopTimeout bounds how long Close waits for kube-apiserver to exit
	// after SIGTERM before it kills it.
	StopTimeout = 10 * time.Second
)

// User is an identity that the Server's static token file authenticates
// (Server.Config returns its client configuration). Without RBAC
// bindings, which an admin creates, it may do nothing but discovery.
type User struct {
	// Name is the user name (request.userInfo.username).
	Name string
	// Groups are the user's groups, besides system:authenticated.
	Groups []string
}

// Config describes a Server. The zero value is one kube-apiserver on a
// free 127.0.0.1 port with RBAC authorization, on a one-member etcd
// process, with AdminUser only, in a temporary directory.
type Config struct {
	// Dir is where the Server makes its directory (kubetest-*), which
	// holds the certificates, the token file, etcd's data and both logs
	// (see LogFile). Empty means the system's temporary directory, and
	// Close removes the Server's directory.
	Dir string
	// Users are more identities for the token file; their names must
	// differ from AdminUser's and each other's, and contain no comma.
	Users []User
	// EtcdMembers is the size of the etcd cluster: 0 means 1.
	EtcdMembers int
	// Flags are more kube-apiserver flags, after the harness's own (a
	// flag given twice takes its last value).
	Flags []string
	// Binary and EtcdBinary are the binaries to run; empty means the
	// ones Lookup finds (StartServer never builds).
	Binary, EtcdBinary string
}

// Server is a kube-apiserver process and the etcd cluster it stores into.
// Its methods are safe for concurrent use.
type Server struct {
	dir     string
	tmpDir  string
	etcd    *etcdproc.Cluster
	url     string
	caPEM   []byte
	tokens  map[string]string
	logFile string
	proc    *proc.Process

	closeOnce sync.Once
	closeErr  error
}

// StartServer starts etcd and kube-apiserver as cfg describes and returns
// once the API server's /readyz answers ok. ctx bounds the start; it
// never builds: without binaries it fails with an error matching
// ErrNotBuilt. On failure nothing is left running. Close the Server when
// done.
func StartServer(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.resolve(); err != nil {
		return nil, err
	}
	// A port found free may be taken before kube-apiserver binds it: try
	// again on another.
	for attempt := 1; ; attempt++ {
		s, err := startOnce(ctx, cfg)
		if err == nil || attempt == 3 || !errors.Is(err, syscall.EADDRINUSE) || ctx.Err() != nil {
			return s, err
		}
	}
}

// resolve fills in the binaries and checks the users.
func (cfg *Config) resolve() error {
	if cfg.Binary == "" || cfg.EtcdBinary == "" {
		apiserver, etcd, err := Lookup()
		if err != nil {
			return err
		}
		if cfg.Binary == "" {
			cfg.Binary = apiserver
		}
		if cfg.EtcdBinary == "" {
			cfg.EtcdBinary = etcd
		}
	}
	seen := map[string]bool{AdminUser: true}
	for _, u := range cfg.Users {
		if u.Name == "" || seen[u.Name] || strings.ContainsAny(u.Name+strings.Join(u.Groups, ""), ",\"\n") {
			return fmt.Errorf("kubetest: user %q: empty, repeated, or has a comma, quote or newline", u.Name)
		}
		seen[u.Name] = true
	}
	return nil
}

func startOnce(ctx context.Context, cfg Config) (_ *Server, err error) {
	s := &Server{tokens: map[string]string{}}
	// A directory of its own in cfg.Dir: a retry must not find the data
	// of a failed attempt.
	if s.dir, err = os.MkdirTemp(cfg.Dir, "kubetest-"); err != nil {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	if cfg.Dir == "" {
		s.tmpDir = s.dir
	}
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()
	s.etcd, err = etcdproc.StartCluster(ctx, etcdproc.Config{
		Dir: filepath.Join(s.dir, "etcd"), Members: cfg.EtcdMembers, Binary: cfg.EtcdBinary,
		TickInterval: 100 * time.Millisecond, ElectionTimeout: time.Second, NoFsync: true,
	})
	if err != nil {
		return nil, fmt.Errorf("kubetest: etcd: %w", err)
	}
	p, err := generatePKI(s.dir)
	if err != nil {
		return nil, fmt.Errorf("kubetest: certificates: %w", err)
	}
	s.caPEM = p.caPEM
	tokenFile, err := s.writeTokens(cfg.Users)
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s.url = "https://127.0.0.1:" + strconv.Itoa(port)
	args := []string{
		"--etcd-servers=" + strings.Join(s.etcd.Endpoints(), ","),
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(s.dir, "certs"),
		"--tls-cert-file=" + p.certFile, "--tls-private-key-file=" + p.keyFile,
		"--client-ca-file=" + p.caFile,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + p.saPublic,
		"--service-account-signing-key-file=" + p.saPrivate,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--token-auth-file=" + tokenFile,
		"--authorization-mode=RBAC",
		"--allow-privileged=true",
		"--profiling=false",
	}
	s.logFile = filepath.Join(s.dir, "kube-apiserver.log")
	if err := s.start(cfg.Binary, append(args, cfg.Flags...)); err != nil {
		return nil, err
	}
	if err := s.waitReady(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// writeTokens writes the static token file: a random bearer token for
// AdminUser and for each of users.
func (s *Server) writeTokens(users []User) (string, error) {
	var b strings.Builder
	all := append([]User{{Name: AdminUser, Groups: []string{"system:masters"}}}, users...)
	for i, u := range all {
		raw := make([]byte, 16)
		if _, err := rand.Read(raw); err != nil {
			return "", err
		}
		tok := hex.EncodeToString(raw)
		s.tokens[u.Name] = tok
		fmt.Fprintf(&b, "%s,%s,uid-%d,\"%s\"\n", tok, u.Name, i, strings.Join(u.Groups, ","))
	}
	path := filepath.Join(s.dir, "tokens.csv")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return "", fmt.Errorf("kubetest: %w", err)
	}
	return path, nil
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("kubetest: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start starts kube-apiserver with args, its output going to s.logFile.
func (s *Server) start(bin string, args []string) error {
	p, err := proc.Start(proc.Spec{Name: "kube-apiserver", Binary: bin, Args: args, LogFile: s.logFile})
	if err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	s.proc = p
	return nil
}

// waitReady polls /readyz until it answers 200, the process exits or ctx
// ends.
func (s *Server) waitReady(ctx context.Context) error {
	hc, err := s.httpClient()
	if err != nil {
		return err
	}
	defer hc.CloseIdleConnections()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if s.ready(ctx, hc) {
			return nil
		}
		select {
		case <-s.proc.Done():
			return fmt.Errorf("kubetest: %w", s.proc.ExitError(nil))
		case <-ctx.Done():
			return fmt.Errorf("kubetest: %w", s.proc.NotReady(ctx.Err(), nil))
		case <-t.C:
		}
	}
}

// ready reports whether /readyz answers 200 to the admin.
func (s *Server) ready(ctx context.Context, hc *http.Client) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/readyz", nil)
	if err != nil {
		return false
	}
	req.Header.Set("Authorization", "Bearer "+s.tokens[AdminUser])
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// httpClient returns a client that trusts the server's CA and keeps no
// connection alive.
func (s *Server) httpClient() (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.caPEM) {
		return nil, errors.New("kubetest: bad CA certificate")
	}
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		DisableKeepAlives: true,
	}}, nil
}

// URL returns the API server's base URL (https://127.0.0.1:port).
func (s *Server) URL() string { return s.url }

// CA returns the PEM of the CA certificate that signed the serving
// certificate.
func (s *Server) CA() []byte { return append([]byte(nil), s.caPEM...) }

// LogFile returns the file kube-apiserver's output goes to.
func (s *Server) LogFile() string { return s.logFile }

// EtcdEndpoints returns the client URLs of the etcd members the API
// server stores into.
func (s *Server) EtcdEndpoints() []string { return s.etcd.Endpoints() }

// PID returns kube-apiserver's process id.
func (s *Server) PID() int { return s.proc.PID() }

// AdminConfig returns a new client configuration for AdminUser.
func (s *Server) AdminConfig() *rest.Config {
	cfg, _ := s.Config(AdminUser)
	return cfg
}

// Config returns a new client configuration that authenticates as user
// (AdminUser or a name in Config.Users) with its bearer token. Its QPS
// and Burst are high (1000, 2000) so that client-go's rate limiter does
// not pace tests.
func (s *Server) Config(user string) (*rest.Config, error) {
	tok, ok := s.tokens[user]
	if !ok {
		return nil, fmt.Errorf("kubetest: no user %q in the token file", user)
	}
	return s.config(tok), nil
}

func (s *Server) config(token string) *rest.Config {
	return &rest.Config{
		Host: s.url, BearerToken: token,
		TLSClientConfig: rest.TLSClientConfig{CAData: append([]byte(nil), s.caPEM...)},
		QPS:             1000, Burst: 2000,
	}
}

// ServiceAccountConfig creates the namespace (if missing) and the service
// account name in it, and returns a client configuration that
// authenticates as that service account with a token from the
// TokenRequest API, valid for an hour: a least-privilege identity
// (system:serviceaccount:<namespace>:<name>) that RBAC bindings made with
// AdminConfig can grant exactly what a test needs.
func (s *Server) ServiceAccountConfig(ctx context.Context, namespace, name string) (*rest.Config, error) {
	cs, err := kubernetes.NewForConfig(s.AdminConfig())
	if err != nil {
		return nil, err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("kubetest: namespace %s: %w", namespace, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("kubetest: service account %s/%s: %w", namespace, name, err)
	}
	hour := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &hour},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("kubetest: token of %s/%s: %w", namespace, name, err)
	}
	return s.config(tr.Status.Token), nil
}

// Close stops kube-apiserver (SIGTERM, then SIGKILL after StopTimeout),
// then etcd, and removes the directory it made. It waits for both to
// exit. Later calls return the first call's result.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		if s.proc != nil {
			s.proc.Stop(StopTimeout)
		}
		if s.etcd != nil {
			errs = append(errs, s.etcd.Close())
		}
		if s.tmpDir != "" {
			errs = append(errs, os.RemoveAll(s.tmpDir))
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}
