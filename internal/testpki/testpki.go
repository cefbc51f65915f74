// Package testpki makes a certificate authority and its certificates at
// test or benchmark time, for mutual TLS (no private key is committed).
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority whose files live in one directory.
type CA struct {
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// File is the CA certificate's PEM file.
	File   string
	serial int64
}

// Files are one issued certificate's PEM files.
type Files struct {
	Cert, Key string
}

// New makes a CA in a test's temporary directory.
func New(t testing.TB) *CA {
	t.Helper()
	p, err := NewIn(t.TempDir(), "kvroute mesh test CA")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Issue writes a certificate for name (its common name and DNS SAN, with
// IP SAN 127.0.0.1; good for serving and for client authentication).
func (p *CA) Issue(t testing.TB, name string) Files {
	t.Helper()
	f, err := p.IssueFiles(name)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// NewIn makes a CA called commonName whose files (ca.pem, then each issued
// certificate's) are written to dir, for tools that run outside a test.
func NewIn(dir, commonName string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: commonName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	p := &CA{dir: dir, cert: cert, key: key, serial: 1}
	p.File = filepath.Join(p.dir, "ca.pem")
	return p, writePEM(p.File, "CERTIFICATE", der)
}

// IssueFiles is Issue returning its error.
func (p *CA) IssueFiles(name string) (Files, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Files{}, err
	}
	p.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{name}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		return Files{}, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Files{}, err
	}
	f := Files{Cert: filepath.Join(p.dir, name+".pem"), Key: filepath.Join(p.dir, name+"-key.pem")}
	if err := writePEM(f.Cert, "CERTIFICATE", der); err != nil {
		return Files{}, err
	}
	return f, writePEM(f.Key, "PRIVATE KEY", kder)
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
