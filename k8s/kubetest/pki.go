package kubetest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"fmt"
	"path/filepath"

	"github.com/fencekit/fencekit/internal/pki"
)

// certs is what generatePKI wrote: the paths of the files the API server
// reads and the CA certificate clients trust.
type certs struct {
	caFile, certFile, keyFile string // serving certificate and its CA
	saPublic, saPrivate       string // service-account token keys
	caPEM                     []byte
}

// generatePKI writes into dir a self-signed CA, a serving certificate for
// 127.0.0.1 and localhost signed by it, and the key pair that signs
// service-account tokens. Keys are ECDSA P-256; the certificates are
// valid for a day.
func generatePKI(dir string) (certs, error) {
	p := certs{
		caFile: filepath.Join(dir, "ca.crt"), certFile: filepath.Join(dir, "apiserver.crt"),
		keyFile: filepath.Join(dir, "apiserver.key"), saPublic: filepath.Join(dir, "sa.pub"),
		saPrivate: filepath.Join(dir, "sa.key"),
	}
	ca, err := pki.NewCA("fencekit-kubetest-ca")
	if err != nil {
		return certs{}, err
	}
	srv, err := ca.Issue("kube-apiserver", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		[]string{"kubernetes", "kubernetes.default", "kubernetes.default.svc"})
	if err != nil {
		return certs{}, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return certs{}, err
	}
	p.caPEM = pki.EncodePEM("CERTIFICATE", ca.DER)
	files := []struct {
		path, typ string
		der       func() ([]byte, error)
	}{
		{p.caFile, "CERTIFICATE", func() ([]byte, error) { return ca.DER, nil }},
		{p.certFile, "CERTIFICATE", func() ([]byte, error) { return srv.DER, nil }},
		{p.keyFile, "PRIVATE KEY", func() ([]byte, error) { return x509.MarshalPKCS8PrivateKey(srv.Key) }},
		{p.saPrivate, "PRIVATE KEY", func() ([]byte, error) { return x509.MarshalPKCS8PrivateKey(saKey) }},
		{p.saPublic, "PUBLIC KEY", func() ([]byte, error) { return x509.MarshalPKIXPublicKey(&saKey.PublicKey) }},
	}
	for _, f := range files {
		der, err := f.der()
		if err != nil {
			return certs{}, err
		}
		if err := pki.WritePEM(f.path, f.typ, der); err != nil {
			return certs{}, fmt.Errorf("kubetest: %w", err)
		}
	}
	return p, nil
}
