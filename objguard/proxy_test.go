package objguard_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/fencekit/fencekit/internal/s3proc"
)

// applied is one write the store applied, as the proxy saw it: the
// request's conditions and token, and the response's ETag.
type applied struct {
	method      string // PUT or DELETE
	key         string
	ifMatch     string // the request's If-Match, or ""
	ifNoneMatch string // the request's If-None-Match, or ""
	etag        string // the new version's ETag ("" for a DELETE)
	token       string // x-amz-meta-fencekit-token, or ""
	deleted     bool   // a tombstone
}

// proxy is an in-process HTTP proxy in front of an S3 server. It can
// strip the conditional headers of chosen methods (re-signing the request
// with the test credentials, as a store that ignores them would behave),
// drop replies after the server answered (the client sees its connection
// close: the outcome is unknown to it), and delay requests; and it records
// every write the server applied.
type proxy struct {
	t      testing.TB
	srv    *http.Server
	ln     net.Listener
	URL    string
	bucket string

	mu      sync.Mutex
	strip   map[string]bool            // methods whose conditions are stripped
	drop    func(r *http.Request) bool // drop this reply?
	delay   func(r *http.Request) time.Duration
	history []applied
	dropped int
}

// startProxy starts a proxy to the S3 server at target, stopped when t
// ends.
func startProxy(t testing.TB, target, bucket string) *proxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, ln: ln, URL: "http://" + ln.Addr().String(), bucket: bucket, strip: map[string]bool{}}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	rp := &httputil.ReverseProxy{
		Transport: tr,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Host = pr.In.Host // the client signed the proxy's host
			if d := p.delayOf(pr.In); d > 0 {
				time.Sleep(d)
			}
			p.maybeStrip(pr.Out)
		},
		ModifyResponse: func(resp *http.Response) error {
			p.record(resp)
			if p.dropOf(resp.Request) {
				return errDropReply
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, errDropReply) {
				p.mu.Lock()
				p.dropped++
				p.mu.Unlock()
				if hj, ok := w.(http.Hijacker); ok {
					if c, _, err := hj.Hijack(); err == nil {
						c.Close()
						return
					}
				}
			}
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	p.srv = &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	go p.srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.srv.Shutdown(ctx)
		tr.CloseIdleConnections()
	})
	return p
}

var errDropReply = errors.New("proxy: reply dropped")

// stripConditions makes the proxy strip If-Match and If-None-Match from
// requests of the given methods.
func (p *proxy) stripConditions(methods ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range methods {
		p.strip[m] = true
	}
}

// faults sets the functions that choose the replies to drop and the
// requests to delay (nil: none).
func (p *proxy) faults(drop func(*http.Request) bool, delay func(*http.Request) time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drop, p.delay = drop, delay
}

func (p *proxy) dropOf(r *http.Request) bool {
	p.mu.Lock()
	f := p.drop
	p.mu.Unlock()
	return f != nil && f(r)
}

func (p *proxy) delayOf(r *http.Request) time.Duration {
	p.mu.Lock()
	f := p.delay
	p.mu.Unlock()
	if f == nil {
		return 0
	}
	return f(r)
}

// maybeStrip removes the conditions of r when its method is stripped,
// and signs it again.
func (p *proxy) maybeStrip(r *http.Request) {
	p.mu.Lock()
	strip := p.strip[r.Method]
	p.mu.Unlock()
	if !strip || (r.Header.Get("If-Match") == "" && r.Header.Get("If-None-Match") == "") {
		return
	}
	r.Header.Del("If-Match")
	r.Header.Del("If-None-Match")
	r.Header.Del("Authorization")
	hash := r.Header.Get("X-Amz-Content-Sha256")
	creds := aws.Credentials{AccessKeyID: s3proc.AccessKey, SecretAccessKey: s3proc.SecretKey}
	if err := v4.NewSigner().SignHTTP(r.Context(), creds, r, hash, "s3", s3proc.Region, time.Now(),
		func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }); err != nil { // S3 signs the path as sent
		p.t.Errorf("proxy: sign again: %v", err)
	}
}

// record notes a write the server applied.
func (p *proxy) record(resp *http.Response) {
	r := resp.Request
	if resp.StatusCode/100 != 2 || (r.Method != http.MethodPut && r.Method != http.MethodDelete) {
		return
	}
	key := strings.TrimPrefix(r.URL.Path, "/"+p.bucket+"/")
	if q := r.URL.Query(); key == r.URL.Path || len(q) > 1 || len(q) == 1 && q.Get("x-id") == "" { // not an object write
		return
	}
	a := applied{method: r.Method, key: key, ifMatch: r.Header.Get("If-Match"), ifNoneMatch: r.Header.Get("If-None-Match"),
		etag: resp.Header.Get("ETag"), token: r.Header.Get("X-Amz-Meta-Fencekit-Token"),
		deleted: r.Header.Get("X-Amz-Meta-Fencekit-Deleted") == "1"}
	p.mu.Lock()
	p.history = append(p.history, a)
	p.mu.Unlock()
}

// writes returns the applied writes recorded so far, in the order their
// responses reached the proxy, and the number of replies dropped.
func (p *proxy) writes() ([]applied, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]applied(nil), p.history...), p.dropped
}
