package mesh

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// TLSFiles are the mesh's mutual-TLS credentials (config peers.tls): every
// kvroute presents CertFile both when it serves its subscribers and when it
// subscribes, and trusts a peer iff the peer's certificate chains to CAFile
// (and, with AllowedNames, carries one of them as a DNS or URI SAN).
type TLSFiles struct {
	CertFile, KeyFile, CAFile string
	// AllowedNames, when not empty, narrows trust to certificates naming
	// one of them (a DNS name or a URI such as a SPIFFE id), exactly.
	AllowedNames []string
	// ServerName, when set, is the name checked in every peer's server
	// certificate instead of the host of its address.
	ServerName string
}

// errNameNotAllowed: a certificate chains to the CA but names none of
// AllowedNames.
var errNameNotAllowed = errors.New("peer certificate names none of peers.tls.allowed_names")

// keyPair serves CertFile and KeyFile, read again when either changes (a
// rotated Kubernetes Secret swaps both), checked at most once a second; a
// pair that does not load leaves the last good one in use.
type keyPair struct {
	certFile, keyFile string
	reloaded          func(err error) // nil err: a new pair is in use
	mu                sync.Mutex
	cur               *tls.Certificate
	stamp             string
	checked           time.Time
}

// fileStamp changes when either file is replaced or rewritten.
func fileStamp(paths ...string) string {
	var b strings.Builder
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil {
			fmt.Fprintf(&b, "%d/%d/", st.ModTime().UnixNano(), st.Size())
		}
		b.WriteString("|")
	}
	return b.String()
}

func (k *keyPair) load() error {
	stamp := fileStamp(k.certFile, k.keyFile)
	c, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		return err
	}
	k.cur, k.stamp = &c, stamp
	return nil
}

func (k *keyPair) get() (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if time.Since(k.checked) < time.Second {
		return k.cur, nil
	}
	k.checked = time.Now()
	if fileStamp(k.certFile, k.keyFile) == k.stamp {
		return k.cur, nil
	}
	err := k.load()
	if k.reloaded != nil {
		k.reloaded(err)
	}
	return k.cur, nil
}

// tlsConfigs loads f into the server and client sides' configs; reloaded
// hears of every later certificate reload. Errors name the config key.
func (f *TLSFiles) tlsConfigs(reloaded func(error)) (server, client *tls.Config, err error) {
	kp := &keyPair{certFile: f.CertFile, keyFile: f.KeyFile, reloaded: reloaded}
	if err := kp.load(); err != nil {
		return nil, nil, fmt.Errorf("peers.tls.cert_file, key_file: %w", err)
	}
	pem, err := os.ReadFile(f.CAFile)
	if err != nil {
		return nil, nil, fmt.Errorf("peers.tls.ca_file: %w", err)
	}
	ca := x509.NewCertPool()
	if !ca.AppendCertsFromPEM(pem) {
		return nil, nil, errors.New("peers.tls.ca_file: no PEM certificates")
	}
	verify := func(cs tls.ConnectionState) error {
		if len(f.AllowedNames) == 0 {
			return nil
		}
		if len(cs.PeerCertificates) == 0 {
			return errNameNotAllowed
		}
		leaf := cs.PeerCertificates[0]
		for _, n := range leaf.DNSNames {
			if slices.Contains(f.AllowedNames, n) {
				return nil
			}
		}
		for _, u := range leaf.URIs {
			if slices.Contains(f.AllowedNames, u.String()) {
				return nil
			}
		}
		return errNameNotAllowed
	}
	server = &tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return kp.get() },
		ClientCAs:      ca, ClientAuth: tls.RequireAndVerifyClientCert,
		MinVersion: tls.VersionTLS13, NextProtos: []string{"h2"}, VerifyConnection: verify,
	}
	client = &tls.Config{
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return kp.get() },
		RootCAs:              ca, ServerName: f.ServerName,
		MinVersion: tls.VersionTLS13, NextProtos: []string{"h2"}, VerifyConnection: verify,
	}
	return server, client, nil
}
