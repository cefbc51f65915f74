package mesh

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
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

// tlsConfigs loads f into the server and client sides' configs. Errors name
// the config key.
func (f *TLSFiles) tlsConfigs() (server, client *tls.Config, err error) {
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
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
		Certificates: []tls.Certificate{cert}, ClientCAs: ca, ClientAuth: tls.RequireAndVerifyClientCert,
		MinVersion: tls.VersionTLS13, NextProtos: []string{"h2"}, VerifyConnection: verify,
	}
	client = &tls.Config{
		Certificates: []tls.Certificate{cert}, RootCAs: ca, ServerName: f.ServerName,
		MinVersion: tls.VersionTLS13, NextProtos: []string{"h2"}, VerifyConnection: verify,
	}
	return server, client, nil
}
