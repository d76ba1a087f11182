package etcdtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
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

// certs are the files and client settings of a cluster's generated
// certificates.
type certs struct {
	caFile, certFile, keyFile string
	client                    *tls.Config
}

// genCerts writes a new CA, a certificate for the members (server and
// client use: peers present it to each other) and a client certificate to
// dir.
func genCerts(dir string, members int) (*certs, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "fencekit etcdtest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	leaf := func(cn string, server bool) ([]byte, *ecdsa.PrivateKey, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		if server {
			tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
			// Over a unix socket, etcd's client expects the socket's
			// file name as the server name.
			tmpl.DNSNames = []string{"localhost"}
			for i := range members {
				tmpl.DNSNames = append(tmpl.DNSNames, sockName(i))
			}
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		return der, key, err
	}
	srvDER, srvKey, err := leaf("fencekit etcdtest member", true)
	if err != nil {
		return nil, err
	}
	// The client certificate names no etcd user: with authentication on,
	// clients log in with a password.
	cliDER, cliKey, err := leaf("fencekit etcdtest client", false)
	if err != nil {
		return nil, err
	}
	c := &certs{
		caFile:   filepath.Join(dir, "ca.pem"),
		certFile: filepath.Join(dir, "member.pem"),
		keyFile:  filepath.Join(dir, "member-key.pem"),
	}
	if err := writePEM(c.caFile, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	if err := writePEM(c.certFile, "CERTIFICATE", srvDER); err != nil {
		return nil, err
	}
	srvKeyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		return nil, err
	}
	if err := writePEM(c.keyFile, "EC PRIVATE KEY", srvKeyDER); err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	c.client = &tls.Config{
		RootCAs:      pool,
		ServerName:   "localhost",
		Certificates: []tls.Certificate{{Certificate: [][]byte{cliDER}, PrivateKey: cliKey}},
		MinVersion:   tls.VersionTLS12,
	}
	return c, nil
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(fmt.Sprintf("etcdtest: crypto/rand: %v", err))
	}
	return n
}
