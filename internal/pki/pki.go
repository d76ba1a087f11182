package pki

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
	"time"
)

// Validity is how long certificates are valid, from an hour before they
// are made (to allow for clock skew).
const Validity = 24 * time.Hour

// CA is a self-signed certificate authority.
type CA struct {
	// Cert is the CA's certificate; DER is its encoding.
	Cert *x509.Certificate
	DER  []byte
	key  *ecdsa.PrivateKey
}

// NewCA makes a CA named cn.
func NewCA(cn string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(Validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, DER: der, key: key}, nil
}

// Leaf is a certificate a CA signed, and its key.
type Leaf struct {
	DER []byte
	Key *ecdsa.PrivateKey
}

// Issue makes a certificate named cn for usage. With hosts not nil it is a
// server certificate for 127.0.0.1, ::1, localhost and hosts.
func (ca *CA) Issue(cn string, usage []x509.ExtKeyUsage, hosts []string) (Leaf, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Leaf{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    ca.Cert.NotBefore,
		NotAfter:     ca.Cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
	}
	if hosts != nil {
		tmpl.DNSNames = append([]string{"localhost"}, hosts...)
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return Leaf{}, err
	}
	return Leaf{DER: der, Key: key}, nil
}

// EncodePEM returns der as a PEM block of type typ.
func EncodePEM(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// WritePEM writes der to path as a PEM block of type typ, readable by the
// owner only.
func WritePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, EncodePEM(typ, der), 0o600)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(fmt.Sprintf("pki: crypto/rand: %v", err))
	}
	return n
}
