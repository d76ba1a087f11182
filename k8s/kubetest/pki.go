package kubetest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is what generatePKI wrote: the paths of the files the API server
// reads and the CA certificate clients trust.
type pki struct {
	caFile, certFile, keyFile string // serving certificate and its CA
	saPublic, saPrivate       string // service-account token keys
	caPEM                     []byte
}

// generatePKI writes into dir a self-signed CA, a serving certificate for
// 127.0.0.1 and localhost signed by it, and the key pair that signs
// service-account tokens. Keys are ECDSA P-256; the certificates are
// valid for a day.
func generatePKI(dir string) (pki, error) {
	p := pki{
		caFile: filepath.Join(dir, "ca.crt"), certFile: filepath.Join(dir, "apiserver.crt"),
		keyFile: filepath.Join(dir, "apiserver.key"), saPublic: filepath.Join(dir, "sa.pub"),
		saPrivate: filepath.Join(dir, "sa.key"),
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return pki{}, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fencekit-kubetest-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return pki{}, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return pki{}, err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return pki{}, err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		return pki{}, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return pki{}, err
	}
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	files := []struct {
		path, typ string
		der       func() ([]byte, error)
	}{
		{p.caFile, "CERTIFICATE", func() ([]byte, error) { return caDER, nil }},
		{p.certFile, "CERTIFICATE", func() ([]byte, error) { return srvDER, nil }},
		{p.keyFile, "PRIVATE KEY", func() ([]byte, error) { return x509.MarshalPKCS8PrivateKey(srvKey) }},
		{p.saPrivate, "PRIVATE KEY", func() ([]byte, error) { return x509.MarshalPKCS8PrivateKey(saKey) }},
		{p.saPublic, "PUBLIC KEY", func() ([]byte, error) { return x509.MarshalPKIXPublicKey(&saKey.PublicKey) }},
	}
	for _, f := range files {
		der, err := f.der()
		if err != nil {
			return pki{}, err
		}
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: der}), 0o600); err != nil {
			return pki{}, fmt.Errorf("kubetest: %w", err)
		}
	}
	return p, nil
}
