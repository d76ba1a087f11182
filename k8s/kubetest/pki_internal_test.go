package kubetest

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"testing"
)

// The serving certificate verifies under the CA for the API server's
// names and addresses, pairs with its key, and the service-account keys
// parse: what kube-apiserver reads.
func TestGeneratePKI(t *testing.T) {
	p, err := generatePKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(p.caPEM) {
		t.Fatal("CA PEM does not parse")
	}
	pair, err := tls.LoadX509KeyPair(p.certFile, p.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"127.0.0.1", "localhost", "kubernetes.default.svc"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("serving certificate for %s: %v", name, err)
		}
	}
	for path, parse := range map[string]func([]byte) (any, error){
		p.saPrivate: x509.ParsePKCS8PrivateKey,
		p.saPublic:  x509.ParsePKIXPublicKey,
	} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(b)
		if block == nil {
			t.Fatalf("%s: no PEM", path)
		}
		if _, err := parse(block.Bytes); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
}
