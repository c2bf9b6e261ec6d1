package manager

import (
	"maps"
	"net/http"
	"net/http/pprof"
	"strings"

	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// pprofHandlers serve the pprof endpoints, as net/http/pprof registers them.
var pprofHandlers = map[string]http.Handler{
	"/debug/pprof/":        http.HandlerFunc(pprof.Index),
	"/debug/pprof/cmdline": http.HandlerFunc(pprof.Cmdline),
	"/debug/pprof/profile": http.HandlerFunc(pprof.Profile),
	"/debug/pprof/symbol":  http.HandlerFunc(pprof.Symbol),
	"/debug/pprof/trace":   http.HandlerFunc(pprof.Trace),
}

// setProfiling serves pprof on the diagnostics endpoint when profiling is
// on, and only then: Cluster API's options serve it whenever the endpoint
// is secure, and never when it is not.
func setProfiling(metricsOpts *metricsserver.Options, profiling bool) {
	for path := range metricsOpts.ExtraHandlers {
		if strings.HasPrefix(path, "/debug/pprof/") {
			delete(metricsOpts.ExtraHandlers, path)
		}
	}
	if !profiling {
		return
	}
	if metricsOpts.ExtraHandlers == nil {
		metricsOpts.ExtraHandlers = map[string]http.Handler{}
	}
	maps.Copy(metricsOpts.ExtraHandlers, pprofHandlers)
}
