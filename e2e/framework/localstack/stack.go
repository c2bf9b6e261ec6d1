// Package localstack runs Kubernetes and Cluster API on one machine, with no
// cloud and no container image: etcd, kube-apiserver, kube-scheduler and
// kube-controller-manager built from their modules, kwok for the Nodes, the
// Cluster API core manager with its webhooks, and a simulated infrastructure
// provider that turns Machines into kwok Nodes.
package localstack

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/faultproxy"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/pki"
)

// Topology says where the workload cluster's API server is.
type Topology string

const (
	// SelfHosted runs the management and the workload cluster in one API
	// server: the Cluster's kubeconfig points at the management cluster.
	SelfHosted Topology = "SelfHosted"

	// SeparateWorkload runs the workload cluster in a second API server, with
	// its own scheduler, controller manager and kwok, and etcd shared under
	// another prefix.
	SeparateWorkload Topology = "SeparateWorkload"
)

// NodeNotReadyLabel, set to "true" on a kwok Node, makes kwok report it
// NotReady until the label is removed, from the time it was set.
const NodeNotReadyLabel = "node-not-ready.stage.kwok.x-k8s.io"

// nodeNotReadyStageYAML is the kwok stage behind NodeNotReadyLabel.
//
//go:embed stages/node-not-ready.yaml
var nodeNotReadyStageYAML []byte

// NodeKubeletDeadLabel, set to "true" on a kwok Node, kills its kubelet:
// the Node's conditions turn Unknown, as when a kubelet stops posting its
// status, and the node lifecycle controller finds it unreachable.
const NodeKubeletDeadLabel = "kubelet-dead.stage.e2e.capi-autoscaler.io"

// nodeKubeletDeadStageYAML is the kwok stage behind NodeKubeletDeadLabel.
//
//go:embed stages/node-kubelet-dead.yaml
var nodeKubeletDeadStageYAML []byte

// startTimeout bounds how long one component may take to become healthy.
const startTimeout = 2 * time.Minute

// Options configure a stack.
type Options struct {
	// Topology is SelfHosted when empty.
	Topology Topology

	// RepoRoot is the root of this repository; the binaries are looked up in
	// RepoRoot/bin/k8s, the Cluster API and kwok manifests in the modules
	// pinned by RepoRoot/hack/e2e-tools, and the autoscaler's CRDs in
	// RepoRoot/config/crd/bases.
	RepoRoot string

	// WorkDir holds certificates, kubeconfigs, data and logs. It must be
	// empty or missing; when not set, a new temporary directory is used and
	// removed by Stop.
	WorkDir string

	// AutoscalerNeedsTokens makes the fault proxies refuse the
	// autoscaler's requests that authenticate with a client certificate,
	// that is with the admin kubeconfig of a Cluster's kubeconfig Secret:
	// the autoscaler is to reach both clusters with ServiceAccount tokens
	// (see ServiceAccountKubeconfig and WorkloadServiceAccountKubeconfig).
	AutoscalerNeedsTokens bool
}

// Cluster is one API server of the stack with the components that serve it
// (none for one started by StartAPIServer).
type Cluster struct {
	// Name is management, workload, or the name given to StartAPIServer.
	Name string

	// Kubeconfig is an admin kubeconfig, written to KubeconfigPath.
	Kubeconfig     []byte
	KubeconfigPath string

	// Config and Client talk to the API server as admin.
	Config *rest.Config
	Client client.Client

	// Proxy stands between the autoscaler and the API server: the
	// Cluster's kubeconfig Secret and the ServiceAccount kubeconfigs point
	// at it.
	// Faults it injects hit only requests whose user agent is the
	// autoscaler's. Nil for an API server started by StartAPIServer.
	Proxy *faultproxy.Proxy

	// apiServer is the API server's process: StopAPIServer stops it and
	// RestartAPIServer replaces it.
	apiServer *Process
	// apiServerStarts counts the API server's processes, to give each a
	// log of its own.
	apiServerStarts int
}

// APIServerPid is the process id of the cluster's API server, 0 when the
// stack did not start it; e.g. to read its memory.
func (c *Cluster) APIServerPid() int {
	if c.apiServer == nil {
		return 0
	}
	return c.apiServer.Pid()
}

// Stack is a running local stack.
type Stack struct {
	// Management is the management cluster, where Cluster API runs.
	Management *Cluster

	// Workload is the workload cluster whose Nodes kwok simulates; the same
	// as Management when self-hosted.
	Workload *Cluster

	// WorkDir holds the certificates, kubeconfigs, data and logs.
	WorkDir string

	topology     Topology
	repoRoot     string
	binDir       string
	removeDir    bool
	ca           *pki.CA
	serving      pki.KeyPair
	admin        pki.KeyPair
	frontProxy   pki.KeyPair
	saKeyPath    string
	etcdURL      string
	mu           sync.Mutex
	processes    []*Process
	stopProvider context.CancelFunc
	providerDone chan error
}

// Start starts a stack and returns once every component is ready. On error,
// whatever was started is stopped again.
func Start(ctx context.Context, opts Options) (_ *Stack, retErr error) {
	log := ctrl.LoggerFrom(ctx)
	if opts.Topology == "" {
		opts.Topology = SelfHosted
	}
	if opts.Topology != SelfHosted && opts.Topology != SeparateWorkload {
		return nil, fmt.Errorf("unknown topology %q", opts.Topology)
	}
	repoRoot, err := filepath.Abs(opts.RepoRoot)
	if err != nil {
		return nil, err
	}
	s := &Stack{topology: opts.Topology, repoRoot: repoRoot, binDir: filepath.Join(repoRoot, "bin", "k8s"), WorkDir: opts.WorkDir}
	if err := s.checkBinaries(); err != nil {
		return nil, err
	}
	modules, err := resolveModules(ctx, filepath.Join(repoRoot, "hack", "e2e-tools"))
	if err != nil {
		return nil, err
	}
	if s.WorkDir == "" {
		if s.WorkDir, err = os.MkdirTemp("", "localstack-"); err != nil {
			return nil, err
		}
		s.removeDir = true
	} else if entries, err := os.ReadDir(s.WorkDir); err == nil && len(entries) > 0 {
		// A stack starts from empty etcd data: old data names ports and
		// certificates that are gone.
		return nil, fmt.Errorf("work directory %s is not empty", s.WorkDir)
	}
	defer func() {
		if retErr != nil {
			if err := s.Stop(); err != nil {
				log.Error(err, "Failed to stop the stack after a failed start")
			}
		}
	}()

	started := time.Now()
	if err := s.writeCertificates(); err != nil {
		return nil, err
	}
	if err := s.startEtcd(ctx); err != nil {
		return nil, err
	}
	if s.Management, err = s.startCluster(ctx, "management", modules); err != nil {
		return nil, err
	}
	s.Workload = s.Management
	if opts.Topology == SeparateWorkload {
		if s.Workload, err = s.startCluster(ctx, "workload", modules); err != nil {
			return nil, err
		}
	}
	if err := s.startProxies(opts.AutoscalerNeedsTokens); err != nil {
		return nil, err
	}
	if err := s.startClusterAPI(ctx, modules); err != nil {
		return nil, err
	}
	if err := s.startProvider(ctx); err != nil {
		return nil, err
	}
	log.Info("Local stack is ready", "topology", opts.Topology, "duration", time.Since(started).Round(time.Millisecond), "workDir", s.WorkDir)
	return s, nil
}

// StartProcess runs binary against the stack, e.g. the autoscaler manager,
// logging to name.log in LogDir (a process started again under the same
// name truncates it). The stack tracks it and Stop stops it first,
// unless it was stopped or killed through the returned handle before.
func (s *Stack) StartProcess(ctx context.Context, name, binary string, args ...string) (*Process, error) {
	return s.StartProcessWithEnv(ctx, name, binary, nil, args...)
}

// StartProcessWithEnv is StartProcess with env, NAME=value entries, added
// to the launcher's environment (later entries win).
func (s *Stack) StartProcessWithEnv(ctx context.Context, name, binary string, env []string, args ...string) (*Process, error) {
	p, err := startProcessWithEnv(ctx, s.logDir(), name, binary, env, args...)
	if err != nil {
		return nil, err
	}
	s.track(p)
	return p, nil
}

// Topology is where the workload cluster's API server is.
func (s *Stack) Topology() Topology {
	return s.topology
}

// LogDir is where every component writes its log.
func (s *Stack) LogDir() string {
	return s.logDir()
}

// Stop stops every component, newest first, and removes a temporary work
// directory.
func (s *Stack) Stop() error {
	var errs []error
	if s.stopProvider != nil {
		s.stopProvider()
		if err := <-s.providerDone; err != nil {
			errs = append(errs, fmt.Errorf("simulated provider: %w", err))
		}
		s.stopProvider = nil
	}
	s.mu.Lock()
	processes := s.processes
	s.processes = nil
	s.mu.Unlock()
	for i := len(processes) - 1; i >= 0; i-- {
		if err := processes[i].Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, cluster := range []*Cluster{s.Management, s.Workload} {
		if cluster != nil && cluster.Proxy != nil {
			if err := cluster.Proxy.Close(); err != nil {
				errs = append(errs, fmt.Errorf("fault proxy of %s: %w", cluster.Name, err))
			}
		}
	}
	if s.removeDir && len(errs) == 0 {
		if err := os.RemoveAll(s.WorkDir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *Stack) track(p *Process) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.processes = append(s.processes, p)
}

func (s *Stack) logDir() string {
	return filepath.Join(s.WorkDir, "logs")
}

func (s *Stack) pkiDir() string {
	return filepath.Join(s.WorkDir, "pki")
}

func (s *Stack) binary(name string) string {
	return filepath.Join(s.binDir, name)
}

// binaries are the programs the stack runs, built by
// hack/build-kube-binaries.sh.
var binaries = []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok", "capi-manager"}

func (s *Stack) checkBinaries() error {
	var missing []string
	for _, b := range binaries {
		if _, err := os.Stat(s.binary(b)); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing binaries in %s; build them with hack/build-kube-binaries.sh %s %s", s.binDir, s.binDir, strings.Join(missing, " "))
	}
	return nil
}

func (s *Stack) writeCertificates() error {
	var err error
	if s.ca, err = pki.NewCA("localstack-ca"); err != nil {
		return err
	}
	// Valid for local connections to any component of the stack.
	if s.serving, err = s.ca.Serving(
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		net.IPv4(127, 0, 0, 1), net.IPv6loopback,
	); err != nil {
		return err
	}
	if s.admin, err = s.ca.Client("localstack-admin", "system:masters"); err != nil {
		return err
	}
	// The API server proxies to aggregated APIs as front-proxy-client; the
	// scheduler and controller manager read the same CA to trust it.
	if s.frontProxy, err = s.ca.Client(frontProxyUser); err != nil {
		return err
	}
	saKey, err := pki.NewKey()
	if err != nil {
		return err
	}
	s.saKeyPath = filepath.Join(s.pkiDir(), "sa.key")
	if err := os.MkdirAll(s.logDir(), 0o755); err != nil {
		return err
	}
	return writeFiles(s.pkiDir(), map[string][]byte{
		"ca.crt":                 s.ca.CertPEM,
		"ca.key":                 s.ca.KeyPEM,
		"serving.crt":            s.serving.Cert,
		"serving.key":            s.serving.Key,
		"sa.key":                 saKey,
		"front-proxy-client.crt": s.frontProxy.Cert,
		"front-proxy-client.key": s.frontProxy.Key,
	})
}

// modules are the directories of the Go modules whose manifests the stack
// installs.
type modules struct {
	clusterAPI string
	kwok       string
}

// resolveModules finds the module directories at the versions the binaries
// are built from.
func resolveModules(ctx context.Context, toolsModule string) (modules, error) {
	dir := func(path string) (string, error) {
		cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", path)
		cmd.Dir = toolsModule
		out, err := cmd.Output()
		if err != nil {
			var exitErr *exec.ExitError
			if errors.As(err, &exitErr) {
				err = fmt.Errorf("%w: %s", err, exitErr.Stderr)
			}
			return "", fmt.Errorf("locating module %s from %s: %w", path, toolsModule, err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	var m modules
	var err error
	if m.clusterAPI, err = dir("sigs.k8s.io/cluster-api"); err != nil {
		return m, err
	}
	if m.kwok, err = dir("sigs.k8s.io/kwok"); err != nil {
		return m, err
	}
	return m, nil
}

// writeFiles writes name → content into dir with private permissions.
func writeFiles(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o600); err != nil {
			return err
		}
	}
	return nil
}
