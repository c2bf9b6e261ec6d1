package manager

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/cluster-api/util/flags"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/yaml"

	testenv "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/envtest"
)

// The diagnostics endpoint serves /metrics, and /debug/pprof/ with
// --profiling, over HTTPS to the callers the API server authenticates and
// authorizes: a Prometheus bound to the shipped metrics-reader role reads the
// metrics and nothing else.
func TestDiagnosticsEndpoint(t *testing.T) {
	g := NewWithT(t)
	env, err := testenv.Start(testenv.Options{WithoutProjectCRDs: true})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(env.Stop()).To(Succeed()) })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	clientset, err := kubernetes.NewForConfig(env.Config)
	g.Expect(err).NotTo(HaveOccurred())

	metricsReader := &rbacv1.ClusterRole{}
	manifest, err := os.ReadFile(filepath.Join(repoRoot, "config", "rbac", "metrics_reader_role.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(yaml.UnmarshalStrict(manifest, metricsReader)).To(Succeed())
	profileReader := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "profile-reader"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/debug/pprof/*"}, Verbs: []string{"get"}}},
	}
	// tokenFor returns the token of a new ServiceAccount bound to role.
	tokenFor := func(name string, role *rbacv1.ClusterRole) string {
		t.Helper()
		g.Expect(env.Client.Create(ctx, role)).To(Succeed())
		account := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name}}
		g.Expect(env.Client.Create(ctx, account)).To(Succeed())
		g.Expect(env.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: account.Namespace, Name: account.Name}},
		})).To(Succeed())
		token, err := clientset.CoreV1().ServiceAccounts(account.Namespace).CreateToken(ctx, account.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		return token.Status.Token
	}
	prometheus := tokenFor("prometheus", metricsReader)
	profiler := tokenFor("profiler", profileReader)

	address := freeLocalAddress(g)
	opts := &commandLine{
		diagnostics:             flags.ManagerOptions{DiagnosticsAddress: address, TLSMinVersion: "VersionTLS12"},
		profiling:               true,
		gracefulShutdownTimeout: 5 * time.Second,
	}
	mgrOpts, err := managerOptions(opts)
	g.Expect(err).NotTo(HaveOccurred())
	mgr, err := ctrl.NewManager(env.Config, mgrOpts)
	g.Expect(err).NotTo(HaveOccurred())
	stopped := make(chan error)
	go func() { stopped <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		g.Expect(<-stopped).To(Succeed())
	})

	// The manager's certificate is self-signed.
	httpClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // A test of authorization, not of the certificate.
	get := func(path, token string) (int, string) {
		request, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+address+path, nil)
		g.Expect(err).NotTo(HaveOccurred())
		if token != "" {
			request.Header.Set("Authorization", "Bearer "+token)
		}
		response, err := httpClient.Do(request)
		if err != nil {
			return 0, err.Error()
		}
		defer response.Body.Close()
		body, err := io.ReadAll(response.Body)
		g.Expect(err).NotTo(HaveOccurred())
		return response.StatusCode, string(body)
	}
	g.Eventually(func() int {
		status, _ := get("/metrics", prometheus)
		return status
	}, time.Minute).Should(Equal(http.StatusOK))

	for _, tt := range []struct {
		caller, path, token string
		want                int
	}{
		{caller: "anonymous", path: "/metrics", want: http.StatusUnauthorized},
		{caller: "anonymous", path: "/debug/pprof/", want: http.StatusUnauthorized},
		// controller-runtime's filter answers a token the API server
		// rejects with 500 "Authentication failed".
		{caller: "a bad token", path: "/metrics", token: "not-a-token", want: http.StatusInternalServerError},
		{caller: "metrics reader", path: "/metrics", token: prometheus, want: http.StatusOK},
		{caller: "metrics reader", path: "/debug/pprof/", token: prometheus, want: http.StatusForbidden},
		{caller: "metrics reader", path: "/debug/pprof/heap", token: prometheus, want: http.StatusForbidden},
		{caller: "profile reader", path: "/debug/pprof/", token: profiler, want: http.StatusOK},
		{caller: "profile reader", path: "/debug/pprof/heap", token: profiler, want: http.StatusOK},
		{caller: "profile reader", path: "/metrics", token: profiler, want: http.StatusForbidden},
	} {
		status, body := get(tt.path, tt.token)
		g.Expect(status).To(Equal(tt.want), "GET %s by %s: %s", tt.path, tt.caller, body)
	}
	_, metrics := get("/metrics", prometheus)
	g.Expect(metrics).To(ContainSubstring("controller_runtime_"))
}

// pprof is served only with --profiling, and without authentication only
// in development, with --insecure-diagnostics.
func TestManagerOptionsProfiling(t *testing.T) {
	tests := []struct {
		name        string
		insecure    bool
		profiling   bool
		profiler    string
		wantPprof   bool
		wantInvalid bool
	}{
		{name: "secure, default", wantPprof: false},
		{name: "secure, profiling", profiling: true, wantPprof: true},
		{name: "insecure, default", insecure: true, wantPprof: false},
		{name: "insecure, profiling", insecure: true, profiling: true, wantPprof: true},
		{name: "profiler address with insecure diagnostics", insecure: true, profiler: "localhost:6060"},
		{name: "profiler address alone", profiler: "localhost:6060", wantInvalid: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			opts := &commandLine{
				diagnostics:     flags.ManagerOptions{DiagnosticsAddress: ":8443", InsecureDiagnostics: tt.insecure, TLSMinVersion: "VersionTLS12"},
				profiling:       tt.profiling,
				profilerAddress: tt.profiler,
			}
			mgrOpts, err := managerOptions(opts)
			if tt.wantInvalid {
				g.Expect(err).To(MatchError(ContainSubstring("--insecure-diagnostics")))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(mgrOpts.Metrics.SecureServing).To(Equal(!tt.insecure))
			g.Expect(mgrOpts.PprofBindAddress).To(Equal(tt.profiler))
			for path := range pprofHandlers {
				_, served := mgrOpts.Metrics.ExtraHandlers[path]
				g.Expect(served).To(Equal(tt.wantPprof), path)
			}
		})
	}
}

// freeLocalAddress is a loopback address with a port nothing listens on.
func freeLocalAddress(g Gomega) string {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	defer listener.Close()
	return listener.Addr().String()
}
