package localstack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
)

const (
	// kwokNodeSelector hands kwok only the Nodes of simulated machines.
	kwokNodeSelector = "kwok.x-k8s.io/node=fake"

	// frontProxyUser is the user the API server proxies requests to
	// aggregated API servers as.
	frontProxyUser = "front-proxy-client"
)

// Scheme knows the types of Kubernetes, Cluster API and the simulated
// provider; Cluster clients use it.
var Scheme = runtime.NewScheme()

func init() {
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, clusterv1.AddToScheme, infrav1.AddToScheme,
	} {
		if err := add(Scheme); err != nil {
			panic(err)
		}
	}
}

func (s *Stack) startEtcd(ctx context.Context) error {
	clientPort, err := FreePort()
	if err != nil {
		return err
	}
	peerPort, err := FreePort()
	if err != nil {
		return err
	}
	s.etcdURL = "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	p, err := startProcess(ctx, s.logDir(), "etcd", s.binary("etcd"),
		"--name=localstack",
		"--data-dir="+filepath.Join(s.WorkDir, "etcd"),
		"--listen-client-urls="+s.etcdURL,
		"--advertise-client-urls="+s.etcdURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=localstack="+peerURL,
		// Nothing here outlives the stack; fsync only costs time.
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	)
	if err != nil {
		return err
	}
	s.track(p)
	return p.waitHealthy(ctx, &httpClient, s.etcdURL+"/health")
}

// startCluster starts an API server with its scheduler, controller manager
// and kwok.
func (s *Stack) startCluster(ctx context.Context, name string, m modules) (*Cluster, error) {
	cluster, err := s.StartAPIServer(ctx, name)
	if err != nil {
		return nil, err
	}
	if err := s.startClusterComponents(ctx, cluster, m); err != nil {
		return nil, err
	}
	return cluster, nil
}

// StartAPIServer starts one more API server, storing under its own etcd
// prefix /name, with its admin kubeconfig in WorkDir/name, and nothing else:
// no scheduler, no controller manager, no kwok. It is a lightweight
// workload cluster, to measure a manager serving many clusters without
// running a whole cluster for each. Nothing acts on what is created there:
// a Node is Ready once its status says so but keeps the not-ready taint the
// API server puts on new Nodes until it is removed, pods stay where they are
// bound with the status they are given, and pods need their namespace's
// default ServiceAccount created first. Stop stops it. The name must not be
// taken (management, workload, or a directory of WorkDir).
func (s *Stack) StartAPIServer(ctx context.Context, name string) (*Cluster, error) {
	return s.StartAPIServerWithOptions(ctx, name, APIServerOptions{})
}

// APIServerOptions tune an API server that StartAPIServerWithOptions
// starts, e.g. to fit many of them in the memory of one machine.
type APIServerOptions struct {
	// ExtraArgs come after the stack's own flags, so they win over them.
	ExtraArgs []string
	// Env is added to the API server's environment, e.g. GOMEMLIMIT=200MiB.
	Env []string
}

// StartAPIServerWithOptions is StartAPIServer with tuned flags and
// environment, which RestartAPIServer keeps.
func (s *Stack) StartAPIServerWithOptions(ctx context.Context, name string, opts APIServerOptions) (*Cluster, error) {
	dir := filepath.Join(s.WorkDir, name)
	// Mkdir, not MkdirAll: a second API server of the same name would share
	// the first one's etcd prefix.
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("API server %s: %w", name, err)
	}
	pki := s.pkiDir()
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	server := "https://127.0.0.1:" + strconv.Itoa(port)
	args := []string{
		"--etcd-servers=" + s.etcdURL,
		"--etcd-prefix=/" + name,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + filepath.Join(pki, "serving.crt"),
		"--tls-private-key-file=" + filepath.Join(pki, "serving.key"),
		"--client-ca-file=" + filepath.Join(pki, "ca.crt"),
		"--requestheader-client-ca-file=" + filepath.Join(pki, "ca.crt"),
		"--requestheader-allowed-names=" + frontProxyUser,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + filepath.Join(pki, "front-proxy-client.crt"),
		"--proxy-client-key-file=" + filepath.Join(pki, "front-proxy-client.key"),
		"--service-account-key-file=" + s.saKeyPath,
		"--service-account-signing-key-file=" + s.saKeyPath,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--authorization-mode=Node,RBAC",
		"--allow-privileged=true",
		// No Pod network: the kubernetes Service gets no loopback endpoints.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	}
	apiserver, err := startProcessWithEnv(ctx, s.logDir(), name+"-kube-apiserver", s.binary("kube-apiserver"),
		opts.Env, append(args, opts.ExtraArgs...)...)
	if err != nil {
		return nil, err
	}
	s.track(apiserver)
	healthClient, err := httpsClient(s.ca.CertPEM, &s.admin)
	if err != nil {
		return nil, err
	}
	if err := apiserver.waitHealthy(ctx, healthClient, server+"/readyz"); err != nil {
		return nil, err
	}

	cluster, err := s.newCluster(name, server, filepath.Join(dir, "kubeconfig"))
	if err != nil {
		return nil, err
	}
	cluster.apiServer, cluster.apiServerStarts = apiserver, 1
	return cluster, nil
}

// StopAPIServer kills the API server of cluster (SIGKILL), as a crash or a
// network partition takes a control plane away, and nothing else: etcd
// keeps the cluster's data, and the cluster's scheduler, controller
// manager and kwok, and every client of it fail until RestartAPIServer.
// Its fault proxy answers 503 until the API server is ready again. The management cluster's API server cannot be
// stopped: Cluster API and the simulated provider need it.
func (s *Stack) StopAPIServer(cluster *Cluster) error {
	if cluster == s.Management {
		return fmt.Errorf("the API server of %s serves the management cluster: it cannot be stopped", cluster.Name)
	}
	if cluster.apiServer == nil {
		return fmt.Errorf("the API server of %s is not one of the stack's", cluster.Name)
	}
	if cluster.Proxy != nil {
		cluster.Proxy.SetUpstreamReady(false)
	}
	return cluster.apiServer.Kill()
}

// RestartAPIServer starts the API server of cluster again after
// StopAPIServer, with the same flags (address, etcd prefix, certificates),
// and returns once it is ready. Its log is <name>-kube-apiserver-<n>.log
// for its n-th start.
func (s *Stack) RestartAPIServer(ctx context.Context, cluster *Cluster) error {
	stopped := cluster.apiServer
	if stopped == nil {
		return fmt.Errorf("the API server of %s is not one of the stack's", cluster.Name)
	}
	select {
	case <-stopped.Exited():
	default:
		return fmt.Errorf("the API server of %s is running (pid %d)", cluster.Name, stopped.Pid())
	}
	name := fmt.Sprintf("%s-kube-apiserver-%d", cluster.Name, cluster.apiServerStarts+1)
	apiserver, err := startProcessWithEnv(ctx, s.logDir(), name, stopped.Binary(), stopped.env, stopped.Args()...)
	if err != nil {
		return err
	}
	s.track(apiserver)
	cluster.apiServer = apiserver
	cluster.apiServerStarts++
	healthClient, err := httpsClient(s.ca.CertPEM, &s.admin)
	if err != nil {
		return err
	}
	if err := apiserver.waitHealthy(ctx, healthClient, cluster.Config.Host+"/readyz"); err != nil {
		return err
	}
	if cluster.Proxy != nil {
		cluster.Proxy.SetUpstreamReady(true)
	}
	return nil
}

// newCluster writes an admin kubeconfig for server and builds clients.
func (s *Stack) newCluster(name, server, kubeconfigPath string) (*Cluster, error) {
	data, err := clientcmd.Write(*kubeconfig(name, server, s.ca.CertPEM,
		&clientcmdapi.AuthInfo{ClientCertificateData: s.admin.Cert, ClientKeyData: s.admin.Key}))
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(kubeconfigPath, data, 0o600); err != nil {
		return nil, err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		return nil, err
	}
	// Setting up clusters creates many objects at once.
	cfg.QPS, cfg.Burst = 100, 200
	c, err := client.New(cfg, client.Options{Scheme: Scheme})
	if err != nil {
		return nil, err
	}
	return &Cluster{Name: name, Kubeconfig: data, KubeconfigPath: kubeconfigPath, Config: cfg, Client: c}, nil
}

func (s *Stack) startClusterComponents(ctx context.Context, cluster *Cluster, m modules) error {
	pki := s.pkiDir()
	common := func(port int) []string {
		return []string{
			"--kubeconfig=" + cluster.KubeconfigPath,
			"--authentication-kubeconfig=" + cluster.KubeconfigPath,
			"--authorization-kubeconfig=" + cluster.KubeconfigPath,
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--tls-cert-file=" + filepath.Join(pki, "serving.crt"),
			"--tls-private-key-file=" + filepath.Join(pki, "serving.key"),
			"--leader-elect=false",
		}
	}
	schedulerPort, err := FreePort()
	if err != nil {
		return err
	}
	scheduler, err := startProcess(ctx, s.logDir(), cluster.Name+"-kube-scheduler", s.binary("kube-scheduler"), common(schedulerPort)...)
	if err != nil {
		return err
	}
	s.track(scheduler)

	controllerManagerPort, err := FreePort()
	if err != nil {
		return err
	}
	// The node lifecycle controller (on by default) removes the not-ready
	// taint once kwok reports a Node Ready; the garbage collector deletes
	// what Cluster API owns.
	controllerManager, err := startProcess(ctx, s.logDir(), cluster.Name+"-kube-controller-manager", s.binary("kube-controller-manager"),
		append(common(controllerManagerPort),
			"--service-account-private-key-file="+s.saKeyPath,
			"--root-ca-file="+filepath.Join(pki, "ca.crt"),
			"--cluster-signing-cert-file="+filepath.Join(pki, "ca.crt"),
			"--cluster-signing-key-file="+filepath.Join(pki, "ca.key"),
			"--use-service-account-credentials=false",
		)...)
	if err != nil {
		return err
	}
	s.track(controllerManager)

	kwokPort, err := FreePort()
	if err != nil {
		return err
	}
	stages := filepath.Join(m.kwok, "kustomize", "stage")
	nodeNotReadyStage := filepath.Join(s.WorkDir, cluster.Name+"-node-not-ready-stage.yaml")
	nodeKubeletDeadStage := filepath.Join(s.WorkDir, cluster.Name+"-node-kubelet-dead-stage.yaml")
	for path, stage := range map[string][]byte{nodeNotReadyStage: nodeNotReadyStageYAML, nodeKubeletDeadStage: nodeKubeletDeadStageYAML} {
		if err := os.WriteFile(path, stage, 0o600); err != nil {
			return fmt.Errorf("writing a kwok stage: %w", err)
		}
	}
	kwok, err := startProcess(ctx, s.logDir(), cluster.Name+"-kwok", s.binary("kwok"),
		"--kubeconfig="+cluster.KubeconfigPath,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector="+kwokNodeSelector,
		"--server-address=127.0.0.1:"+strconv.Itoa(kwokPort),
		"--node-lease-duration-seconds=40",
		// Pod IPs; the default /24 runs out in scale tests.
		"--cidr=10.244.0.0/16",
		"--config="+filepath.Join(stages, "node", "fast", "node-initialize.yaml"),
		"--config="+filepath.Join(stages, "node", "heartbeat-with-lease", "node-heartbeat-with-lease.yaml"),
		// Labelling a Node node-not-ready.stage.kwok.x-k8s.io=true makes it NotReady.
		"--config="+nodeNotReadyStage,
		// Labelling it kubelet-dead.stage.e2e.capi-autoscaler.io=true kills its kubelet.
		"--config="+nodeKubeletDeadStage,
		"--config="+filepath.Join(stages, "pod", "fast", "pod-ready.yaml"),
		"--config="+filepath.Join(stages, "pod", "fast", "pod-complete.yaml"),
		"--config="+filepath.Join(stages, "pod", "fast", "pod-delete.yaml"),
	)
	if err != nil {
		return err
	}
	s.track(kwok)

	componentClient, err := httpsClient(s.ca.CertPEM, nil)
	if err != nil {
		return err
	}
	if err := scheduler.waitHealthy(ctx, componentClient, fmt.Sprintf("https://127.0.0.1:%d/healthz", schedulerPort)); err != nil {
		return err
	}
	if err := controllerManager.waitHealthy(ctx, componentClient, fmt.Sprintf("https://127.0.0.1:%d/healthz", controllerManagerPort)); err != nil {
		return err
	}
	return kwok.waitHealthy(ctx, &httpClient, fmt.Sprintf("http://127.0.0.1:%d/healthz", kwokPort))
}
