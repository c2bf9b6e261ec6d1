package pki_test

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/pki"
)

func TestServingCertificateVerifiesForItsNamesOnly(t *testing.T) {
	g := NewWithT(t)
	ca, err := pki.NewCA("test CA")
	g.Expect(err).NotTo(HaveOccurred())
	pair, err := ca.Serving([]string{"webhook.capd-system.svc"}, net.IPv4(127, 0, 0, 1))
	g.Expect(err).NotTo(HaveOccurred())
	leaf := parse(g, pair)

	roots := x509.NewCertPool()
	g.Expect(roots.AppendCertsFromPEM(ca.CertPEM)).To(BeTrue())
	opts := x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, name := range []string{"webhook.capd-system.svc", "127.0.0.1"} {
		opts.DNSName = name
		_, err = leaf.Verify(opts)
		g.Expect(err).NotTo(HaveOccurred(), name)
	}
	opts.DNSName = "other.capd-system.svc"
	_, err = leaf.Verify(opts)
	g.Expect(err).To(HaveOccurred())

	_, err = ca.Serving(nil)
	g.Expect(err).To(HaveOccurred())
}

func TestClientCertificateNamesUserAndGroups(t *testing.T) {
	g := NewWithT(t)
	ca, err := pki.NewCA("test CA")
	g.Expect(err).NotTo(HaveOccurred())
	pair, err := ca.Client("admin", "system:masters")
	g.Expect(err).NotTo(HaveOccurred())
	leaf := parse(g, pair)
	g.Expect(leaf.Subject.CommonName).To(Equal("admin"))
	g.Expect(leaf.Subject.Organization).To(ConsistOf("system:masters"))

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)
	_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	g.Expect(err).To(HaveOccurred(), "a client certificate does not serve")
}

// parse checks that the pair's key matches its certificate and returns the
// certificate.
func parse(g Gomega, pair pki.KeyPair) *x509.Certificate {
	cert, err := tls.X509KeyPair(pair.Cert, pair.Key)
	g.Expect(err).NotTo(HaveOccurred())
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	g.Expect(err).NotTo(HaveOccurred())
	return leaf
}
