package etcdproc

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"

	"github.com/fencekit/fencekit/internal/pki"
)

// Certs are the files and client settings of a cluster's generated
// certificates.
type Certs struct {
	// CAFile, CertFile and KeyFile are the PEM files of the CA and of the
	// members' certificate and key.
	CAFile, CertFile, KeyFile string
	// Client trusts the CA and presents the client certificate.
	Client *tls.Config
}

// GenCerts writes to dir a new CA, a certificate for the members (server
// and client use: peers present it to each other; valid for 127.0.0.1, ::1,
// localhost and dnsNames) and a client certificate.
func GenCerts(dir string, dnsNames ...string) (*Certs, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := pki.NewCA("fencekit etcdproc CA")
	if err != nil {
		return nil, err
	}
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}
	srv, err := ca.Issue("fencekit etcdproc member", both, append([]string{}, dnsNames...))
	if err != nil {
		return nil, err
	}
	// The client certificate names no etcd user: with authentication on,
	// clients log in with a password.
	cli, err := ca.Issue("fencekit etcdproc client", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil)
	if err != nil {
		return nil, err
	}
	c := &Certs{
		CAFile:   filepath.Join(dir, "ca.pem"),
		CertFile: filepath.Join(dir, "member.pem"),
		KeyFile:  filepath.Join(dir, "member-key.pem"),
	}
	srvKeyDER, err := x509.MarshalECPrivateKey(srv.Key)
	if err != nil {
		return nil, err
	}
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{{c.CAFile, "CERTIFICATE", ca.DER}, {c.CertFile, "CERTIFICATE", srv.DER}, {c.KeyFile, "EC PRIVATE KEY", srvKeyDER}} {
		if err := pki.WritePEM(f.path, f.typ, f.der); err != nil {
			return nil, err
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	c.Client = &tls.Config{
		RootCAs:      pool,
		ServerName:   "localhost",
		Certificates: []tls.Certificate{{Certificate: [][]byte{cli.DER}, PrivateKey: cli.Key}},
		MinVersion:   tls.VersionTLS12,
	}
	return c, nil
}
