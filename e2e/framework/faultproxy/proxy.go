// Package faultproxy is an HTTPS proxy in front of a Kubernetes API server
// that injects the faults a client meets in real clusters: throttling,
// server errors, timeouts, slow responses, conflicting writes and dropped
// watch streams. The end-to-end suite puts one in front of each API server
// of the local stack and points the autoscaler at it.
//
// The proxy authenticates callers by their client certificate or passes
// their bearer token on, and tells the API server who they are the way an
// aggregating front proxy does (X-Remote-User/X-Remote-Group), so that the
// API server authorizes every request as the caller's own.
package faultproxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/pki"
)

// Fault is one kind of failure the proxy injects.
type Fault string

const (
	// TooManyRequests answers 429 with Retry-After: 1, as API priority and
	// fairness does under load.
	TooManyRequests Fault = "TooManyRequests"
	// InternalError answers 500.
	InternalError Fault = "InternalError"
	// ServiceUnavailable answers 503, as an API server shutting down does.
	ServiceUnavailable Fault = "ServiceUnavailable"
	// Timeout holds the request for Faults.Hold, or until the client gives
	// up, then answers 504, as an API server whose request timed out does.
	Timeout Fault = "Timeout"
	// Delay forwards the request after a random delay of up to Faults.Hold.
	Delay Fault = "Delay"
	// Conflict refuses an update or patch with 409, as if another writer
	// had changed the object first. Other requests do not get it.
	Conflict Fault = "Conflict"
	// DropWatch cuts a watch stream after a random time of up to
	// Faults.Hold. Other requests do not get it.
	DropWatch Fault = "DropWatch"
)

// Unreachable counts, in Stats.Faults, the targeted requests an Outage
// refused, black-holed or cut: it is not drawn at a rate, and not one of
// AllFaults.
const Unreachable Fault = "Unreachable"

// AllFaults are every fault kind drawn at Faults.Rate.
var AllFaults = []Fault{TooManyRequests, InternalError, ServiceUnavailable, Timeout, Delay, Conflict, DropWatch}

// Faults say how often targeted requests fail, and how.
type Faults struct {
	// Rate is the share of targeted requests that get a fault, from 0 to 1.
	Rate float64
	// Kinds are the faults to choose from, at random among those that apply
	// to a request; AllFaults when empty.
	Kinds []Fault
	// Hold bounds Timeout's hold, Delay's delay and DropWatch's stream
	// life; 5s when zero.
	Hold time.Duration
}

// OutageMode is how an API server is unreachable.
type OutageMode string

const (
	// Refuse closes the connection of each request without an answer, as
	// a host whose API server is down resets it.
	Refuse OutageMode = "Refuse"
	// BlackHole holds each request unanswered until the outage ends or
	// the client gives up, then closes its connection, as a network
	// partition does.
	BlackHole OutageMode = "BlackHole"
)

// Outage makes the API server unreachable for some targeted requests: new
// ones are refused or black-holed, and those in flight, watches included,
// are cut when it starts. The zero Outage ends it.
type Outage struct {
	Mode OutageMode
	// Of picks the targeted requests the API server is unreachable for;
	// every targeted request when nil.
	Of func(*http.Request) bool
}

// Request is a targeted request as the proxy answered it.
type Request struct {
	// Verb, APIGroup, Resource, Subresource, Namespace and Name are the
	// request as RBAC sees it.
	Verb, APIGroup, Resource, Subresource, Namespace, Name string
	// UserAgent is the caller's.
	UserAgent string
	// Status is the HTTP status answered: the injected fault's, or the API
	// server's.
	Status int
	// Fault is the injected fault, empty when none.
	Fault Fault
	// Denied says the API server's authorization refused the request: a
	// 403 for another reason, such as a terminating namespace, is not.
	Denied bool
	// Body is the body of a create, update or patch, as the caller sent
	// it: what tells, say, a deletion mark from its removal. Nil for other
	// verbs.
	Body []byte
}

// Rule is what RBAC checks for a request: "verb group/resource[/subresource]",
// or "verb path" for a non-resource URL.
func (r Request) Rule() string {
	if r.Resource == "" {
		return r.Verb + " " + r.Name
	}
	resource := schema.GroupResource{Group: r.APIGroup, Resource: r.Resource}.String()
	if r.Subresource != "" {
		resource += "/" + r.Subresource
	}
	return r.Verb + " " + resource
}

// Stats count what the proxy saw of targeted requests since it started.
type Stats struct {
	// Requests is how many targeted requests were answered.
	Requests int
	// Faults counts the injected faults by kind.
	Faults map[Fault]int
	// Forbidden are the rules of targeted requests the API server's
	// authorization refused.
	Forbidden sets.Set[string]
	// Used are the rules of targeted requests the API server answered
	// without refusing them.
	Used sets.Set[string]
	// CertificateRequests are the rules of targeted requests refused
	// because they authenticated with a client certificate (see
	// Options.TargetsNeedTokens).
	CertificateRequests sets.Set[string]
}

// Injected is the number of faults injected.
func (s Stats) Injected() int {
	total := 0
	for _, n := range s.Faults {
		total += n
	}
	return total
}

// Options configure a Proxy.
type Options struct {
	// Upstream is the API server's URL.
	Upstream string
	// CA signs the proxy's serving certificate and the client certificates
	// it accepts; the upstream's serving certificate must chain to it.
	CA *pki.CA
	// FrontProxy is the client certificate the proxy presents to the API
	// server to pass on a certificate-authenticated caller's identity; the
	// API server must accept it for request-header authentication.
	FrontProxy pki.KeyPair
	// Target picks the requests that faults apply to, that Stats count and
	// that Observe sees; every request when nil.
	Target func(*http.Request) bool
	// TargetsNeedTokens refuses, with 401, targeted requests that
	// authenticate with a client certificate rather than a bearer token:
	// the target is given ServiceAccount tokens, and a certificate means
	// that it used an administrator's kubeconfig instead.
	TargetsNeedTokens bool
	// Seed makes the proxy's random choices repeatable.
	Seed uint64
}

// Proxy is a running fault-injecting proxy.
type Proxy struct {
	opts     Options
	upstream *url.URL
	listener net.Listener
	server   *http.Server
	// asFrontProxy forwards certificate-authenticated callers; asCaller
	// forwards callers with a bearer token of their own.
	asFrontProxy, asCaller *httputil.ReverseProxy
	requestInfo            *apirequest.RequestInfoFactory
	// upstreamDown is set while the API server is stopped or starting.
	upstreamDown atomic.Bool

	mu     sync.Mutex
	faults Faults
	outage Outage
	// outageChanged is closed, and replaced, when the outage changes: it
	// lets black-holed requests go.
	outageChanged chan struct{}
	// inFlight cancel the targeted requests being answered, to cut them
	// when an outage starts.
	inFlight map[*http.Request]context.CancelCauseFunc
	random   *rand.Rand
	stats    Stats
	observer func(Request)
}

// Start listens on a free loopback port and serves until Close.
func Start(opts Options) (*Proxy, error) {
	upstream, err := url.Parse(opts.Upstream)
	if err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	serving, err := opts.CA.Serving([]string{"localhost"}, net.IPv4(127, 0, 0, 1))
	if err != nil {
		return nil, err
	}
	servingCert, err := tls.X509KeyPair(serving.Cert, serving.Key)
	if err != nil {
		return nil, err
	}
	frontProxyCert, err := tls.X509KeyPair(opts.FrontProxy.Cert, opts.FrontProxy.Key)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(opts.CA.CertPEM) {
		return nil, errors.New("the CA certificate does not parse")
	}

	p := &Proxy{
		opts:     opts,
		upstream: upstream,
		requestInfo: &apirequest.RequestInfoFactory{
			APIPrefixes:          sets.NewString("api", "apis"),
			GrouplessAPIPrefixes: sets.NewString("api"),
		},
		random:        rand.New(rand.NewPCG(opts.Seed, opts.Seed)),
		outageChanged: make(chan struct{}),
		inFlight:      map[*http.Request]context.CancelCauseFunc{},
		stats:         Stats{Faults: map[Fault]int{}, Forbidden: sets.New[string](), Used: sets.New[string](), CertificateRequests: sets.New[string]()},
	}
	p.asFrontProxy = p.reverseProxy(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{frontProxyCert}, MinVersion: tls.VersionTLS12})
	p.asCaller = p.reverseProxy(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})

	p.listener, err = tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{servingCert},
		ClientCAs:    roots,
		ClientAuth:   tls.VerifyClientCertIfGiven,
		MinVersion:   tls.VersionTLS12,
	})
	if err != nil {
		return nil, err
	}
	p.server = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.server.Serve(p.listener) }()
	return p, nil
}

// URL is where the proxy serves.
func (p *Proxy) URL() string {
	return "https://" + p.listener.Addr().String()
}

// Close stops serving and cuts open connections, watches included.
func (p *Proxy) Close() error {
	return p.server.Close()
}

// SetFaults changes the faults from the next request on; the zero Faults
// turn them off.
func (p *Proxy) SetFaults(faults Faults) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = faults
}

// SetOutage starts or, with the zero Outage, ends an outage from the next
// request on, and cuts the requests in flight it applies to.
func (p *Proxy) SetOutage(outage Outage) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.outage = outage
	close(p.outageChanged)
	p.outageChanged = make(chan struct{})
	if outage.Mode == "" {
		return
	}
	for req, cancel := range p.inFlight {
		if outage.Of == nil || outage.Of(req) {
			cancel(errCut)
		}
	}
}

// errCut cancels a request in flight that an outage cuts.
var errCut = errors.New("cut by an outage")

// unreachable is how the API server is unreachable for req, if it is, and
// a channel closed when that changes.
func (p *Proxy) unreachable(req *http.Request) (OutageMode, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.outage.Mode == "" || (p.outage.Of != nil && !p.outage.Of(req)) {
		return "", nil
	}
	return p.outage.Mode, p.outageChanged
}

// track registers a targeted request in flight, with a context an outage
// cancels, until untrack is called.
func (p *Proxy) track(req *http.Request) (tracked *http.Request, untrack func()) {
	ctx, cancel := context.WithCancelCause(req.Context())
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inFlight[req] = cancel
	return req.WithContext(ctx), func() {
		p.mu.Lock()
		delete(p.inFlight, req)
		p.mu.Unlock()
		cancel(nil)
	}
}

// SetUpstreamReady tells the proxy whether its API server is ready. While
// it is not, the proxy answers every request 503 itself, as a load
// balancer that health-checks a control plane does, and counts none: an
// API server still starting forbids, until its RBAC caches have synced,
// what it allows once ready.
func (p *Proxy) SetUpstreamReady(ready bool) {
	p.upstreamDown.Store(!ready)
}

// Observe calls observe after each targeted request is answered, from the
// request's goroutine; nil stops it.
func (p *Proxy) Observe(observe func(Request)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.observer = observe
}

// Stats returns a copy of the counts so far.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	stats := p.stats
	stats.Faults = make(map[Fault]int, len(p.stats.Faults))
	for k, v := range p.stats.Faults {
		stats.Faults[k] = v
	}
	stats.Forbidden = p.stats.Forbidden.Clone()
	stats.Used = p.stats.Used.Clone()
	stats.CertificateRequests = p.stats.CertificateRequests.Clone()
	return stats
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if p.upstreamDown.Load() {
		writeStatus(w, apierrors.NewServiceUnavailable("the API server is not ready"))
		return
	}
	forward, err := p.authenticate(req)
	if err != nil {
		writeStatus(w, apierrors.NewUnauthorized(err.Error()))
		return
	}
	if p.opts.Target != nil && !p.opts.Target(req) {
		forward.ServeHTTP(w, req)
		return
	}

	info, err := p.requestInfo.NewRequestInfo(req)
	if err != nil {
		writeStatus(w, apierrors.NewBadRequest(err.Error()))
		return
	}
	if mode, changed := p.unreachable(req); mode != "" {
		p.record(Request{Verb: info.Verb, APIGroup: info.APIGroup, Resource: info.Resource, Subresource: info.Subresource,
			Namespace: info.Namespace, Name: nameOf(info, req), UserAgent: req.UserAgent(), Status: 499, Fault: Unreachable})
		if mode == BlackHole {
			select {
			case <-changed:
			case <-req.Context().Done():
			}
		}
		// Closes the connection without an answer.
		panic(http.ErrAbortHandler)
	}
	req, untrack := p.track(req)
	defer untrack()
	if p.opts.TargetsNeedTokens && forward == p.asFrontProxy {
		// Authenticated by its client certificate.
		p.refuseCertificate(w, Request{Verb: info.Verb, APIGroup: info.APIGroup, Resource: info.Resource, Subresource: info.Subresource,
			Namespace: info.Namespace, Name: nameOf(info, req), Status: http.StatusUnauthorized})
		return
	}
	body, err := writeBody(info, req)
	if err != nil {
		writeStatus(w, apierrors.NewBadRequest(err.Error()))
		return
	}
	fault, hold := p.chooseFault(info)
	// The rule is recorded when the status is known: a watch is answered
	// long before it ends.
	denied := &deniedFlag{}
	req = req.WithContext(context.WithValue(req.Context(), deniedKey{}, denied))
	recorder := &statusRecorder{ResponseWriter: w, onStatus: func(code int) {
		p.recordRule(Request{Verb: info.Verb, APIGroup: info.APIGroup, Resource: info.Resource, Subresource: info.Subresource,
			Name: nameOf(info, req), Status: code, Fault: fault, Denied: denied.Load()})
	}}
	// Deferred: the reverse proxy aborts the handler with a panic when a
	// stream it copies is cut.
	defer func() {
		if errors.Is(context.Cause(req.Context()), errCut) {
			fault = Unreachable
		}
		p.record(Request{
			Verb: info.Verb, APIGroup: info.APIGroup, Resource: info.Resource, Subresource: info.Subresource,
			Namespace: info.Namespace, Name: nameOf(info, req), UserAgent: req.UserAgent(),
			Status: recorder.status(), Fault: fault, Denied: denied.Load(), Body: body,
		})
	}()
	// A request an outage cuts gets no answer: its connection is closed,
	// after whatever it streamed.
	defer func() {
		if errors.Is(context.Cause(req.Context()), errCut) {
			panic(http.ErrAbortHandler)
		}
	}()
	switch fault {
	case "":
		forward.ServeHTTP(recorder, req)
	case TooManyRequests:
		recorder.Header().Set("Retry-After", "1")
		writeStatus(recorder, apierrors.NewTooManyRequests("injected by the fault proxy", 1))
	case InternalError:
		writeStatus(recorder, apierrors.NewInternalError(errors.New("injected by the fault proxy")))
	case ServiceUnavailable:
		writeStatus(recorder, apierrors.NewServiceUnavailable("injected by the fault proxy"))
	case Timeout:
		select {
		case <-time.After(hold):
		case <-req.Context().Done():
		}
		writeStatus(recorder, apierrors.NewTimeoutError("injected by the fault proxy", 1))
	case Delay:
		select {
		case <-time.After(hold):
		case <-req.Context().Done():
		}
		forward.ServeHTTP(recorder, req)
	case Conflict:
		gr := schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}
		writeStatus(recorder, apierrors.NewConflict(gr, info.Name, errors.New("injected by the fault proxy")))
	case DropWatch:
		ctx, cancel := context.WithTimeout(req.Context(), hold)
		defer cancel()
		forward.ServeHTTP(recorder, req.WithContext(ctx))
	}
}

// writeBody reads the body of a create, update or patch, and puts it back
// for the API server.
func writeBody(info *apirequest.RequestInfo, req *http.Request) ([]byte, error) {
	switch info.Verb {
	case "create", "update", "patch":
	default:
		return nil, nil
	}
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, fmt.Errorf("reading the request body: %w", err)
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	return body, nil
}

// nameOf is the object's name, or the path of a non-resource request.
func nameOf(info *apirequest.RequestInfo, req *http.Request) string {
	if info.IsResourceRequest {
		return info.Name
	}
	return req.URL.Path
}

// authenticate picks how to forward req: with the caller's own bearer
// token, or as the front proxy on behalf of the caller's verified client
// certificate.
func (p *Proxy) authenticate(req *http.Request) (*httputil.ReverseProxy, error) {
	// Callers must not choose the identity the API server sees.
	for header := range req.Header {
		if strings.HasPrefix(http.CanonicalHeaderKey(header), "X-Remote-") {
			req.Header.Del(header)
		}
	}
	if req.Header.Get("Authorization") != "" {
		return p.asCaller, nil
	}
	if req.TLS == nil || len(req.TLS.PeerCertificates) == 0 {
		return nil, errors.New("the fault proxy needs a client certificate or a bearer token")
	}
	cert := req.TLS.PeerCertificates[0]
	req.Header.Set("X-Remote-User", cert.Subject.CommonName)
	for _, group := range cert.Subject.Organization {
		req.Header.Add("X-Remote-Group", group)
	}
	return p.asFrontProxy, nil
}

// refuseCertificate answers a targeted request that authenticated with a
// client certificate, under TargetsNeedTokens, and counts it.
func (p *Proxy) refuseCertificate(w http.ResponseWriter, r Request) {
	p.mu.Lock()
	p.stats.CertificateRequests.Insert(r.Rule())
	p.mu.Unlock()
	writeStatus(w, apierrors.NewUnauthorized("the fault proxy takes bearer tokens only from this client, not a client certificate"))
	p.record(r)
}

// chooseFault decides, at the configured rate, which fault a request gets, and
// for how long a fault that takes time holds it.
func (p *Proxy) chooseFault(info *apirequest.RequestInfo) (Fault, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	faults := p.faults
	if faults.Rate <= 0 || p.random.Float64() >= faults.Rate {
		return "", 0
	}
	kinds := faults.Kinds
	if len(kinds) == 0 {
		kinds = AllFaults
	}
	applicable := slices.DeleteFunc(slices.Clone(kinds), func(f Fault) bool {
		switch f {
		case Conflict:
			return info.Verb != "update" && info.Verb != "patch"
		case DropWatch:
			return info.Verb != "watch"
		}
		return false
	})
	if len(applicable) == 0 {
		return "", 0
	}
	hold := faults.Hold
	if hold <= 0 {
		hold = 5 * time.Second
	}
	fault := applicable[p.random.IntN(len(applicable))]
	if fault == Delay || fault == DropWatch {
		hold = time.Duration(p.random.Int64N(int64(hold)))
	}
	return fault, hold
}

// recordRule records the RBAC rule of a request answered with r.Status:
// refused, or used when the API server answered it.
func (p *Proxy) recordRule(r Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case r.Denied:
		p.stats.Forbidden.Insert(r.Rule())
	case r.Status == http.StatusForbidden:
	case r.Fault == "" || r.Fault == Delay || r.Fault == DropWatch:
		p.stats.Used.Insert(r.Rule())
	}
}

// record counts a request once it is over, and shows it to the observer.
func (p *Proxy) record(r Request) {
	p.mu.Lock()
	p.stats.Requests++
	if r.Fault != "" {
		p.stats.Faults[r.Fault]++
	}
	observe := p.observer
	p.mu.Unlock()
	if observe != nil {
		observe(r)
	}
}

func (p *Proxy) reverseProxy(tlsConfig *tls.Config) *httputil.ReverseProxy {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = tlsConfig
	// The API server speaks HTTP/2 to clients that ask; watches stream
	// either way.
	transport.ForceAttemptHTTP2 = true
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(p.upstream)
			r.Out.Host = p.upstream.Host
		},
		Transport:      transport,
		ModifyResponse: noteDenial,
		// Stream watch events as they come.
		FlushInterval: -1,
		// Cut streams are expected; the proxy counts them.
		ErrorLog: log.New(io.Discard, "", 0),
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			if req.Context().Err() != nil {
				// The client left, or a DropWatch cut the stream.
				return
			}
			writeStatus(w, apierrors.NewServiceUnavailable("the API server cannot be reached: "+err.Error()))
		},
	}
}

// deniedKey keys a request's deniedFlag in its context.
type deniedKey struct{}

// deniedFlag is set when the API server's authorization refused the request.
type deniedFlag = atomic.Bool

// authorizationDenial is how the API server's authorization says no, as
// in `nodes is forbidden: User "x" cannot list resource "nodes" ...`.
var authorizationDenial = regexp.MustCompile(`forbidden: User ".*" cannot `)

// noteDenial flags a 403 that the API server's authorization answered,
// reading the Status it sent and leaving the body for the client.
func noteDenial(resp *http.Response) error {
	denied, ok := resp.Request.Context().Value(deniedKey{}).(*deniedFlag)
	if !ok || resp.StatusCode != http.StatusForbidden {
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	status := &metav1.Status{}
	if json.Unmarshal(body, status) == nil && authorizationDenial.MatchString(status.Message) {
		denied.Store(true)
	}
	return nil
}

// writeStatus answers with err's Status object, as the API server does.
func writeStatus(w http.ResponseWriter, err apierrors.APIStatus) {
	status := err.Status()
	status.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	body, _ := json.Marshal(status)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(int(status.Code))
	_, _ = w.Write(body)
}

// statusRecorder remembers the status a response was answered with, and
// passes flushes on for watch streams.
type statusRecorder struct {
	http.ResponseWriter
	code int
	// onStatus is told the status once.
	onStatus func(code int)
}

func (r *statusRecorder) WriteHeader(code int) {
	r.setStatus(code)
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	r.setStatus(http.StatusOK)
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) setStatus(code int) {
	if r.code != 0 {
		return
	}
	r.code = code
	r.onStatus(code)
}

func (r *statusRecorder) Flush() {
	if flusher, ok := r.ResponseWriter.(http.Flusher); ok {
		flusher.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (r *statusRecorder) Unwrap() http.ResponseWriter {
	return r.ResponseWriter
}

func (r *statusRecorder) status() int {
	if r.code == 0 {
		// Nothing was written: the client went away first.
		return 499
	}
	return r.code
}

// ServiceAccountCaller picks the requests that authenticate with a token
// of the ServiceAccount namespace/name, as its subject claim says: the
// proxy passes tokens on without verifying them, the API server does.
func ServiceAccountCaller(namespace, name string) func(*http.Request) bool {
	subject := "system:serviceaccount:" + namespace + ":" + name
	return func(req *http.Request) bool {
		token, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
		if !ok {
			return false
		}
		parts := strings.Split(token, ".")
		if len(parts) != 3 {
			return false
		}
		payload, err := base64.RawURLEncoding.DecodeString(parts[1])
		if err != nil {
			return false
		}
		var claims struct {
			Subject string `json:"sub"`
		}
		return json.Unmarshal(payload, &claims) == nil && claims.Subject == subject
	}
}
