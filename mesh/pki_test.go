package mesh

import (
	"crypto/tls"
	"testing"

	"github.com/kvroute/kvroute/internal/testpki"
)

// pki issues the tests' mesh certificates.
type pki struct{ ca *testpki.CA }

func newPKI(t *testing.T) *pki { return &pki{ca: testpki.New(t)} }

// issue returns the mesh files of a certificate for name.
func (p *pki) issue(t *testing.T, name string) *TLSFiles {
	f := p.ca.Issue(t, name)
	return &TLSFiles{CertFile: f.Cert, KeyFile: f.Key, CAFile: p.ca.File}
}

// clientTLS is the client side of f, as a raw TLS client would use it.
func clientTLS(t *testing.T, f *TLSFiles) *tls.Config {
	t.Helper()
	_, c, err := f.tlsConfigs(nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
