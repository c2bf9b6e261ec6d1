package faultproxy_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/faultproxy"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/pki"
)

// seen is what the fake API server saw of a request.
type seen struct {
	User          string   `json:"user"`
	Groups        []string `json:"groups"`
	Authorization string   `json:"authorization"`
	ClientCert    string   `json:"clientCert"`
	Body          string   `json:"body,omitempty"`
}

// fixture is a fake API server behind a proxy, and clients of the proxy.
type fixture struct {
	proxy *faultproxy.Proxy
	// admin presents a client certificate; token a bearer token.
	admin, token *http.Client
}

func newFixture(t *testing.T, opts faultproxy.Options) fixture {
	t.Helper()
	g := NewWithT(t)
	ca, err := pki.NewCA("test-ca")
	g.Expect(err).NotTo(HaveOccurred())
	serving, err := ca.Serving([]string{"localhost"}, net.IPv4(127, 0, 0, 1))
	g.Expect(err).NotTo(HaveOccurred())
	frontProxy, err := ca.Client("front-proxy-client")
	g.Expect(err).NotTo(HaveOccurred())
	admin, err := ca.Client("admin", "system:masters")
	g.Expect(err).NotTo(HaveOccurred())
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)

	upstream := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Query().Get("watch") == "true" {
			// A watch: an event every 10ms until the client or the
			// proxy goes away.
			for {
				if _, err := io.WriteString(w, `{"type":"BOOKMARK"}`+"\n"); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				select {
				case <-req.Context().Done():
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
		}
		switch req.URL.Path {
		case "/api/v1/namespaces/a/configmaps/denied":
			writeForbidden(w, `configmaps "denied" is forbidden: User "system:serviceaccount:kube-system:capi-autoscaler" cannot get resource "configmaps" in API group "" in the namespace "a"`)
			return
		case "/api/v1/namespaces/a/events":
			writeForbidden(w, `events "e" is forbidden: unable to create new content in namespace a because it is being terminated`)
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s := seen{User: req.Header.Get("X-Remote-User"), Groups: req.Header.Values("X-Remote-Group"), Authorization: req.Header.Get("Authorization"), Body: string(body)}
		if len(req.TLS.PeerCertificates) > 0 {
			s.ClientCert = req.TLS.PeerCertificates[0].Subject.CommonName
		}
		_ = json.NewEncoder(w).Encode(s)
	}))
	servingCert, err := tls.X509KeyPair(serving.Cert, serving.Key)
	g.Expect(err).NotTo(HaveOccurred())
	upstream.TLS = &tls.Config{Certificates: []tls.Certificate{servingCert}, ClientCAs: roots, ClientAuth: tls.VerifyClientCertIfGiven}
	upstream.StartTLS()
	t.Cleanup(upstream.Close)

	opts.Upstream, opts.CA, opts.FrontProxy = upstream.URL, ca, frontProxy
	proxy, err := faultproxy.Start(opts)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = proxy.Close() })

	adminCert, err := tls.X509KeyPair(admin.Cert, admin.Key)
	g.Expect(err).NotTo(HaveOccurred())
	newClient := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: certs}}}
	}
	return fixture{proxy: proxy, admin: newClient(adminCert), token: newClient()}
}

// do sends a request, with the body {} unless it is a GET.
func (f fixture) do(g Gomega, c *http.Client, method, path, userAgent string) (int, seen, string) {
	body := "{}"
	if method == http.MethodGet {
		body = ""
	}
	return f.send(g, c, method, path, userAgent, body)
}

func (f fixture) send(g Gomega, c *http.Client, method, path, userAgent, body string) (int, seen, string) {
	var reader io.Reader = http.NoBody
	if body != "" {
		reader = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, f.proxy.URL()+path, reader)
	g.Expect(err).NotTo(HaveOccurred())
	req.Header.Set("User-Agent", userAgent)
	if c == f.token {
		req.Header.Set("Authorization", "Bearer the-token")
	}
	// A caller cannot claim an identity of its choosing.
	req.Header.Set("X-Remote-User", "system:admin")
	resp, err := c.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	var s seen
	if resp.StatusCode == http.StatusOK {
		g.Expect(json.Unmarshal(answer, &s)).To(Succeed())
	}
	return resp.StatusCode, s, string(answer)
}

func isAutoscaler(req *http.Request) bool {
	return strings.HasPrefix(req.UserAgent(), "capi-autoscaler")
}

func TestCallersKeepTheirIdentity(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, faultproxy.Options{Target: isAutoscaler})

	code, s, _ := f.do(g, f.admin, http.MethodGet, "/api/v1/nodes", "capi-autoscaler")
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(s).To(Equal(seen{User: "admin", Groups: []string{"system:masters"}, ClientCert: "front-proxy-client"}),
		"a certificate's identity is passed on by the front proxy")

	code, s, _ = f.do(g, f.token, http.MethodGet, "/api/v1/nodes", "capi-autoscaler")
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(s).To(Equal(seen{Authorization: "Bearer the-token"}), "a bearer token is passed on as it is, with no certificate")
}

func TestTargetsNeedTokens(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, faultproxy.Options{Target: isAutoscaler, TargetsNeedTokens: true})

	code, _, body := f.do(g, f.admin, http.MethodGet, "/api/v1/nodes", "capi-autoscaler")
	g.Expect(code).To(Equal(http.StatusUnauthorized), "the target with a certificate: %s", body)

	code, s, _ := f.do(g, f.admin, http.MethodGet, "/api/v1/nodes", "kube-controller-manager")
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(s.User).To(Equal("admin"), "others keep their certificates")

	code, s, _ = f.do(g, f.token, http.MethodGet, "/api/v1/nodes", "capi-autoscaler")
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(s).To(Equal(seen{Authorization: "Bearer the-token"}))

	g.Eventually(f.proxy.Stats).Should(And(
		HaveField("Requests", 2),
		HaveField("CertificateRequests", HaveKey("list nodes"))))
}

func TestInjectsEachFault(t *testing.T) {
	tests := []struct {
		fault        faultproxy.Fault
		method, path string
		isErr        func(error) bool
	}{
		{faultproxy.TooManyRequests, http.MethodGet, "/api/v1/nodes", apierrors.IsTooManyRequests},
		{faultproxy.InternalError, http.MethodGet, "/api/v1/nodes", apierrors.IsInternalError},
		{faultproxy.ServiceUnavailable, http.MethodPost, "/api/v1/namespaces/a/pods/p/eviction", apierrors.IsServiceUnavailable},
		{faultproxy.Timeout, http.MethodDelete, "/api/v1/nodes/n", apierrors.IsTimeout},
		{faultproxy.Conflict, http.MethodPatch, "/apis/cluster.x-k8s.io/v1beta2/namespaces/a/machinedeployments/md/scale", apierrors.IsConflict},
	}
	for _, tt := range tests {
		t.Run(string(tt.fault), func(t *testing.T) {
			g := NewWithT(t)
			f := newFixture(t, faultproxy.Options{Target: isAutoscaler})
			f.proxy.SetFaults(faultproxy.Faults{Rate: 1, Kinds: []faultproxy.Fault{tt.fault}, Hold: 10 * time.Millisecond})

			code, _, body := f.do(g, f.admin, tt.method, tt.path, "capi-autoscaler/v0.1")
			status := &metav1.Status{}
			g.Expect(json.Unmarshal([]byte(body), status)).To(Succeed())
			err := &apierrors.StatusError{ErrStatus: *status}
			g.Expect(tt.isErr(err)).To(BeTrue(), "answered %d: %s", code, body)
			g.Expect(code).To(BeEquivalentTo(status.Code))

			code, _, _ = f.do(g, f.admin, tt.method, tt.path, "kube-scheduler")
			g.Expect(code).To(Equal(http.StatusOK), "requests that are not targeted get no fault")

			// The proxy counts a request once it has answered it.
			g.Eventually(f.proxy.Stats).Should(And(
				HaveField("Requests", 1),
				HaveField("Faults", Equal(map[faultproxy.Fault]int{tt.fault: 1}))))
		})
	}
}

func TestFaultsOnlyWhereTheyApply(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, faultproxy.Options{})
	f.proxy.SetFaults(faultproxy.Faults{Rate: 1, Kinds: []faultproxy.Fault{faultproxy.Conflict, faultproxy.DropWatch}})

	code, _, _ := f.do(g, f.admin, http.MethodGet, "/api/v1/nodes/n", "capi-autoscaler")
	g.Expect(code).To(Equal(http.StatusOK), "a read can neither conflict nor be a watch")
	code, _, _ = f.do(g, f.admin, http.MethodPost, "/api/v1/namespaces/a/pods", "capi-autoscaler")
	g.Expect(code).To(Equal(http.StatusOK), "a create does not conflict")
	code, _, _ = f.do(g, f.admin, http.MethodPut, "/api/v1/nodes/n", "capi-autoscaler")
	g.Expect(code).To(Equal(http.StatusConflict))
	g.Eventually(func() []string { return f.proxy.Stats().Used.UnsortedList() }).Should(ConsistOf("get nodes", "create pods"))
}

func TestDropsWatchStreams(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, faultproxy.Options{})
	f.proxy.SetFaults(faultproxy.Faults{Rate: 1, Kinds: []faultproxy.Fault{faultproxy.DropWatch}, Hold: 200 * time.Millisecond})

	started := time.Now()
	resp, err := f.admin.Get(f.proxy.URL() + "/api/v1/pods?watch=true")
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	events, _ := io.ReadAll(resp.Body)
	g.Expect(time.Since(started)).To(BeNumerically("<", 5*time.Second), "the stream is cut, not left to the client's timeout")
	g.Expect(string(events)).To(ContainSubstring("BOOKMARK"), "events flow until the cut")
	g.Eventually(func() map[faultproxy.Fault]int { return f.proxy.Stats().Faults }).Should(Equal(map[faultproxy.Fault]int{faultproxy.DropWatch: 1}))
}

func TestRateIsHonoured(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, faultproxy.Options{Seed: 7})
	f.proxy.SetFaults(faultproxy.Faults{Rate: 0.3, Kinds: []faultproxy.Fault{faultproxy.InternalError}})
	failed := 0
	const requests = 400
	for range requests {
		if code, _, _ := f.do(g, f.admin, http.MethodGet, "/api/v1/nodes", "capi-autoscaler"); code != http.StatusOK {
			failed++
		}
	}
	g.Expect(failed).To(BeNumerically("~", 0.3*requests, 0.07*requests))

	f.proxy.SetFaults(faultproxy.Faults{})
	code, _, _ := f.do(g, f.admin, http.MethodGet, "/api/v1/nodes", "capi-autoscaler")
	g.Expect(code).To(Equal(http.StatusOK), "the zero Faults turn faults off")
}

func TestObservesAnsweredRequests(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, faultproxy.Options{})
	observed := make(chan faultproxy.Request, 1)
	f.proxy.Observe(func(r faultproxy.Request) { observed <- r })

	f.do(g, f.admin, http.MethodPatch, "/apis/cluster.x-k8s.io/v1beta2/namespaces/ns/machines/m-1", "capi-autoscaler (ClusterAutoscaler ns/prod)")
	g.Expect(<-observed).To(Equal(faultproxy.Request{
		Verb: "patch", APIGroup: "cluster.x-k8s.io", Resource: "machines", Namespace: "ns", Name: "m-1",
		UserAgent: "capi-autoscaler (ClusterAutoscaler ns/prod)", Status: http.StatusOK, Body: []byte("{}"),
	}))
}

func TestCountsAWatchWhileItStreams(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, faultproxy.Options{})

	resp, err := f.admin.Get(f.proxy.URL() + "/api/v1/namespaces/a/pods?watch=true")
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Eventually(func() []string { return f.proxy.Stats().Used.UnsortedList() }).Should(ConsistOf("watch pods"),
		"a watch's permission is used as soon as it is answered, not when it ends")
}

func writeForbidden(w http.ResponseWriter, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusForbidden)
	_ = json.NewEncoder(w).Encode(metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Reason: metav1.StatusReasonForbidden, Code: http.StatusForbidden, Message: message,
	})
}

func TestTellsAuthorizationDenialsFromOtherRefusals(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, faultproxy.Options{})

	code, _, body := f.do(g, f.admin, http.MethodGet, "/api/v1/namespaces/a/configmaps/denied", "capi-autoscaler")
	g.Expect(code).To(Equal(http.StatusForbidden))
	g.Expect(body).To(ContainSubstring("cannot get resource"), "the client gets the API server's answer")
	code, _, _ = f.do(g, f.admin, http.MethodPost, "/api/v1/namespaces/a/events", "capi-autoscaler")
	g.Expect(code).To(Equal(http.StatusForbidden))

	g.Eventually(func() []string { return f.proxy.Stats().Forbidden.UnsortedList() }).Should(ConsistOf("get configmaps"),
		"a terminating namespace refuses new objects, which no permission would change")
}

func TestObservesTheBodiesOfWrites(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, faultproxy.Options{})
	observed := make(chan faultproxy.Request, 1)
	f.proxy.Observe(func(r faultproxy.Request) { observed <- r })

	mark := `{"metadata":{"annotations":{"cluster.x-k8s.io/delete-machine":"2026-11-23T03:30:00Z"}}}`
	code, s, _ := f.send(g, f.admin, http.MethodPatch, "/apis/cluster.x-k8s.io/v1beta2/namespaces/ns/machines/m-1", "capi-autoscaler", mark)
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(s.Body).To(Equal(mark), "the API server gets the body whole")
	g.Expect(string((<-observed).Body)).To(Equal(mark))

	eviction := `{"kind":"Eviction","metadata":{"name":"p"}}`
	f.send(g, f.admin, http.MethodPost, "/api/v1/namespaces/ns/pods/p/eviction", "capi-autoscaler", eviction)
	g.Expect(<-observed).To(And(HaveField("Verb", "create"), HaveField("Subresource", "eviction"), HaveField("Body", BeEquivalentTo(eviction))))

	f.send(g, f.admin, http.MethodDelete, "/api/v1/nodes/n", "capi-autoscaler", `{"kind":"DeleteOptions"}`)
	g.Expect((<-observed).Body).To(BeNil(), "only creates, updates and patches have their body observed")
	f.do(g, f.admin, http.MethodGet, "/api/v1/nodes/n", "capi-autoscaler")
	g.Expect((<-observed).Body).To(BeNil())
}

func TestAnswersItselfWhileTheUpstreamIsNotReady(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, faultproxy.Options{Target: isAutoscaler})

	f.proxy.SetUpstreamReady(false)
	for _, userAgent := range []string{"capi-autoscaler", "kube-scheduler"} {
		code, _, body := f.do(g, f.admin, http.MethodGet, "/api/v1/nodes", userAgent)
		g.Expect(code).To(Equal(http.StatusServiceUnavailable), "%s: %s", userAgent, body)
	}
	g.Expect(f.proxy.Stats().Requests).To(BeZero(), "requests the API server never saw are not counted")

	f.proxy.SetUpstreamReady(true)
	code, _, _ := f.do(g, f.admin, http.MethodGet, "/api/v1/nodes", "capi-autoscaler")
	g.Expect(code).To(Equal(http.StatusOK))
}

// serviceAccountToken is an unsigned token whose subject is the
// ServiceAccount namespace/name: the proxy reads the claim, the fake API
// server checks nothing.
func serviceAccountToken(namespace, name string) string {
	payload, _ := json.Marshal(map[string]string{"sub": "system:serviceaccount:" + namespace + ":" + name})
	return "e30." + base64.RawURLEncoding.EncodeToString(payload) + ".c2ln"
}

// get sends a GET with a bearer token; the error is the connection's.
func (f fixture) get(path, userAgent, token string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, f.proxy.URL()+path, http.NoBody)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("Authorization", "Bearer "+token)
	return f.token.Do(req)
}

func TestRefusesTheRequestsOfAnOutage(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, faultproxy.Options{Target: isAutoscaler})
	workload, manager := serviceAccountToken("kube-system", "capi-autoscaler"), serviceAccountToken("capi-autoscaler-system", "manager")
	f.proxy.SetOutage(faultproxy.Outage{Mode: faultproxy.Refuse, Of: faultproxy.ServiceAccountCaller("kube-system", "capi-autoscaler")})

	_, err := f.get("/api/v1/nodes", "capi-autoscaler", workload)
	g.Expect(err).To(HaveOccurred(), "the connection is closed without an answer")
	for _, caller := range []struct{ userAgent, token string }{{"capi-autoscaler", manager}, {"kube-scheduler", workload}} {
		resp, err := f.get("/api/v1/nodes", caller.userAgent, caller.token)
		g.Expect(err).NotTo(HaveOccurred(), "%s is not cut off", caller.userAgent)
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
		_ = resp.Body.Close()
	}
	g.Expect(f.proxy.Stats().Faults).To(Equal(map[faultproxy.Fault]int{faultproxy.Unreachable: 1}))

	f.proxy.SetOutage(faultproxy.Outage{})
	resp, err := f.get("/api/v1/nodes", "capi-autoscaler", workload)
	g.Expect(err).NotTo(HaveOccurred(), "the zero Outage ends it")
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	_ = resp.Body.Close()
}

func TestBlackHolesRequestsAndCutsWatchesUntilTheOutageEnds(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, faultproxy.Options{Target: isAutoscaler})
	token := serviceAccountToken("kube-system", "capi-autoscaler")
	watch, err := f.get("/api/v1/pods?watch=true", "capi-autoscaler", token)
	g.Expect(err).NotTo(HaveOccurred())
	defer watch.Body.Close()
	streamed := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(watch.Body)
		streamed <- err
	}()

	f.proxy.SetOutage(faultproxy.Outage{Mode: faultproxy.BlackHole})
	g.Eventually(streamed).Should(Receive(HaveOccurred()), "the watch in flight is cut, not ended cleanly")
	answered := make(chan error, 1)
	started := time.Now()
	go func() {
		resp, err := f.get("/api/v1/nodes", "capi-autoscaler", token)
		if err == nil {
			_ = resp.Body.Close()
		}
		answered <- err
	}()
	g.Consistently(answered, 300*time.Millisecond).ShouldNot(Receive(), "a new request is held")
	f.proxy.SetOutage(faultproxy.Outage{})
	g.Eventually(answered).Should(Receive(HaveOccurred()), "let go without an answer once the outage ends")
	g.Expect(time.Since(started)).To(BeNumerically("<", 5*time.Second), "not left to the client's timeout")
	g.Expect(f.proxy.Stats().Faults).To(Equal(map[faultproxy.Fault]int{faultproxy.Unreachable: 2}))
}
