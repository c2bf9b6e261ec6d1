package controller

import (
	"net/http"
	"sync/atomic"

	"k8s.io/client-go/rest"
)

// credentialsTransport sends an engine's requests to its workload cluster
// with the credentials of the connection it was last given. The engine's
// clients are made once, on this transport: when the ClusterCache connects
// again with rotated credentials, the engine goes on with them, and keeps
// its drains, unneeded timers, backoffs and first-sight clocks, instead of
// starting again and forgetting them.
type credentialsTransport struct {
	current atomic.Pointer[http.RoundTripper]
}

// newCredentialsTransport returns a transport with the credentials of
// connection.
func newCredentialsTransport(connection *rest.Config) (*credentialsTransport, error) {
	t := &credentialsTransport{}
	if err := t.use(connection); err != nil {
		return nil, err
	}
	return t, nil
}

// use has the requests from now on sent with the credentials and TLS
// settings of connection.
func (t *credentialsTransport) use(connection *rest.Config) error {
	rt, err := rest.TransportFor(connection)
	if err != nil {
		return err
	}
	t.current.Store(&rt)
	return nil
}

func (t *credentialsTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return (*t.current.Load()).RoundTrip(req)
}

// clientConfig is connection for clients whose requests go through
// transport, which carries the credentials and TLS settings: the rest
// (server, user agent, rate limits, timeout) stays.
func clientConfig(connection *rest.Config, transport http.RoundTripper) *rest.Config {
	config := rest.AnonymousClientConfig(connection)
	config.TLSClientConfig = rest.TLSClientConfig{}
	config.Transport = transport
	return config
}
