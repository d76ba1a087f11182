package pki_test

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/fencekit/fencekit/internal/pki"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A server leaf verifies for its names under the CA, for server use; a
// client leaf has no names and verifies for client use only.
func TestIssue(t *testing.T) {
	ca, err := pki.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	srv, err := ca.Issue("server", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, []string{"m0.sock"})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := x509.ParseCertificate(srv.DER)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"localhost", "m0.sock", "127.0.0.1", "::1"} {
		if _, err := sc.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("server certificate for %s: %v", name, err)
		}
	}
	if _, err := sc.Verify(x509.VerifyOptions{DNSName: "example.com", Roots: roots}); err == nil {
		t.Error("server certificate verifies for example.com")
	}
	cli, err := ca.Issue("client", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := x509.ParseCertificate(cli.DER)
	if err != nil {
		t.Fatal(err)
	}
	if len(cc.DNSNames)+len(cc.IPAddresses) != 0 {
		t.Errorf("client certificate names %v %v", cc.DNSNames, cc.IPAddresses)
	}
	if _, err := cc.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("client certificate verifies for server use")
	}
	if _, err := cc.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate for client use: %v", err)
	}
}

func Example() {
	dir, err := os.MkdirTemp("", "pki-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ca, err := pki.NewCA("example CA")
	if err != nil {
		panic(err)
	}
	path := filepath.Join(dir, "ca.pem")
	if err := pki.WritePEM(path, "CERTIFICATE", ca.DER); err != nil {
		panic(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	block, _ := pem.Decode(b)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		panic(err)
	}
	fmt.Println(block.Type, cert.Subject.CommonName, cert.IsCA, cert.NotAfter.Sub(cert.NotBefore))
	// Output: CERTIFICATE example CA true 25h0m0s
}
