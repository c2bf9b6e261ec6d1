package main

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/simcluster"
)

const (
	namespace = "perf"
	// poolLabel selects the pending pods' node group: only md-burst's
	// template carries pool=burst, so a batch always needs new nodes.
	poolLabel = "perf.capi-autoscaler.io/pool"
	// roleLabel marks the harness's pods: static, pool or batch.
	roleLabel  = "perf.capi-autoscaler.io/role"
	batchLabel = "perf.capi-autoscaler.io/batch"
	kwokNode   = "kwok.x-k8s.io/node"
	poolMD     = "md-pool"
	burstMD    = "md-burst"
)

// createCluster creates a simulated Cluster with two MachineDeployments:
// md-pool (real kwok Nodes, replicas set by the harness, min 0) and
// md-burst (min 0, scale from zero, machines that never provision: the
// harness only measures until the replicas are raised, then resets them).
func (h *harness) createCluster(ctx context.Context, name string, burstMax int) error {
	pool := simcluster.NodeGroup{
		Namespace: namespace, Name: name + "-" + poolMD, Cluster: name,
		MinSize: 0, MaxSize: 1000, Replicas: ptr.To[int32](0),
		CPU: "16", Memory: "64Gi", Pods: "110",
	}
	burst := simcluster.NodeGroup{
		Namespace: namespace, Name: name + "-" + burstMD, Cluster: name,
		MinSize: 0, MaxSize: int32(burstMax), Replicas: ptr.To[int32](0),
		Annotations: map[string]string{"capacity.cluster-autoscaler.kubernetes.io/labels": poolLabel + "=burst"},
		CPU:         "64", Memory: "256Gi", Pods: "250",
		NodeLabels:   map[string]string{poolLabel: "burst"},
		Provisioning: infrav1.ProvisioningHang,
	}
	objects := append(simcluster.ClusterObjects(namespace, name),
		pool.MachineTemplate(), pool.MachineDeployment(), burst.MachineTemplate(), burst.MachineDeployment())
	for _, obj := range objects {
		if cluster, ok := obj.(*clusterv1.Cluster); ok && h.managerOf(name) != nil {
			cluster.Labels = watchFilterLabels(h.managerOf(name).watchFilter)
		}
		if err := h.mgmt.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
	}
	return simcluster.WaitForCluster(ctx, h.mgmt, namespace, name, 5*time.Minute)
}

// clusterAutoscaler uses the defaults (scanInterval 10s, random expander)
// except: scale-down may plan right after a scale-up (delayAfterAdd 0) but
// never removes anything during a run (unneededTime 1h), the pods' owners
// (ConfigMaps standing in for ReplicaSets) do not block a removal, and the
// burst group's machines, which never provision, do not time out (2h).
// Its watch-filter label names the manager that serves it, if any.
func clusterAutoscaler(cluster, watchFilter string) *autoscalingv1alpha1.ClusterAutoscaler {
	return &autoscalingv1alpha1.ClusterAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: cluster, Labels: watchFilterLabels(watchFilter)},
		Spec: autoscalingv1alpha1.ClusterAutoscalerSpec{
			ClusterName:          cluster,
			MaxNodeProvisionTime: &metav1.Duration{Duration: 2 * time.Hour},
			ScaleDown: &autoscalingv1alpha1.ScaleDownConfig{
				DelayAfterAdd:                     &metav1.Duration{},
				UnneededTime:                      &metav1.Duration{Duration: time.Hour},
				SkipNodesWithCustomControllerPods: ptr.To(false),
			},
		},
	}
}

// watchFilterLabels select the objects of the manager started with
// --watch-filter=value; none when value is empty (a manager serving all).
func watchFilterLabels(value string) map[string]string {
	if value == "" {
		return nil
	}
	return map[string]string{clusterv1.WatchLabel: value}
}

// staticNode is a kwok Node of no node group, like a big fixed pool.
func staticNode(name string) *corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("16"),
		corev1.ResourceMemory: resource.MustParse("64Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64", poolLabel: "static"},
			Annotations: map[string]string{kwokNode: "fake"},
		},
		Status: corev1.NodeStatus{
			Capacity: capacity, Allocatable: capacity.DeepCopy(),
			NodeInfo: corev1.NodeSystemInfo{Architecture: "amd64", OperatingSystem: "linux", KubeletVersion: simcluster.KubernetesVersion},
		},
	}
}

// owner is a ConfigMap that the harness's pods name as their controller:
// the autoscaler only needs a controller reference to consider a pod
// movable, the garbage collector only needs the owner to exist, and no
// controller manages ConfigMaps, so nothing recreates or deletes the pods.
func (h *harness) owner(ctx context.Context, name string) (metav1.OwnerReference, error) {
	return createOwner(ctx, h.mgmt, name)
}

// createOwner creates (or gets) the owner ConfigMap name with c.
func createOwner(ctx context.Context, c client.Client, name string) (metav1.OwnerReference, error) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := c.Create(ctx, cm); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return metav1.OwnerReference{}, err
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(cm), cm); err != nil {
			return metav1.OwnerReference{}, err
		}
	}
	return metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: name, UID: cm.UID, Controller: ptr.To(true)}, nil
}

func pod(name string, owner metav1.OwnerReference, podLabels map[string]string, nodeName, cpu, memory string, nodeSelector map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: podLabels, OwnerReferences: []metav1.OwnerReference{owner}},
		Spec: corev1.PodSpec{
			NodeName:     nodeName,
			NodeSelector: nodeSelector,
			Tolerations: []corev1.Toleration{
				// kwok's Nodes are tainted not-ready for a moment.
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
			},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{
				Name: "app", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory),
				}},
			}},
		},
	}
}

// parallel runs f for 0..n-1 on workers goroutines and returns the first error.
func parallel(ctx context.Context, n, workers int, f func(ctx context.Context, i int) error) error {
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(ctx, i); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return firstErr
}

// populate brings the workload cluster to static+pool nodes with
// podsPerNode pods each: static nodes 56% used (30 x 300m of 16 cores),
// pool nodes 11% used (30 x 60m), so that the pool nodes, 20% of the
// cluster, are underutilized and planned for removal.
func (h *harness) populate(ctx context.Context, cluster string, static, pool, podsPerNode int, staticPrefix string) error {
	md := &clusterv1.MachineDeployment{}
	if pool >= 0 {
		if err := h.mgmt.Get(ctx, client.ObjectKey{Namespace: namespace, Name: cluster + "-" + poolMD}, md); err != nil {
			return err
		}
		if ptr.Deref(md.Spec.Replicas, 0) != int32(pool) {
			patch := client.MergeFrom(md.DeepCopy())
			md.Spec.Replicas = ptr.To(int32(pool))
			if err := h.mgmt.Patch(ctx, md, patch); err != nil {
				return err
			}
		}
	}
	h.logf("creating %d static nodes (%s*)", static, staticPrefix)
	if err := parallel(ctx, static, 16, func(ctx context.Context, i int) error {
		err := h.mgmt.Create(ctx, staticNode(fmt.Sprintf("%s%05d", staticPrefix, i)))
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}); err != nil {
		return fmt.Errorf("creating static nodes: %w", err)
	}
	// Wait until every node is Ready: the pool's through Cluster API.
	want := static
	var poolNodes []string
	started := time.Now()
	err := wait.PollUntilContextTimeout(ctx, 5*time.Second, 30*time.Minute, true, func(ctx context.Context) (bool, error) {
		nodes := &corev1.NodeList{}
		if err := h.mgmt.List(ctx, nodes); err != nil {
			return pollAgain(err)
		}
		ready, poolReady := 0, 0
		poolNodes = poolNodes[:0]
		for i := range nodes.Items {
			n := &nodes.Items[i]
			isPool := n.Labels[clusterv1.ClusterNameLabel] == cluster || hasPrefix(n.Name, cluster+"-"+poolMD)
			isStatic := hasPrefix(n.Name, staticPrefix)
			if !nodefacts.KubeletReady(n) {
				continue
			}
			switch {
			case isStatic:
				ready++
			case isPool:
				poolReady++
				poolNodes = append(poolNodes, n.Name)
			}
		}
		h.logf("  nodes ready: static %d/%d, pool %d/%d (%s)", ready, want, poolReady, max(pool, 0), time.Since(started).Round(time.Second))
		return ready >= want && (pool < 0 || poolReady >= pool), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for nodes: %w", err)
	}
	// Pods, bound directly: the scheduler's rate (about 50 binds/s) would
	// dominate otherwise. Owners: one ConfigMap per 50 pods.
	type podSpec struct{ name, node, cpu, memory, role string }
	var specs []podSpec
	for i := 0; i < static; i++ {
		node := fmt.Sprintf("%s%05d", staticPrefix, i)
		for j := 0; j < podsPerNode; j++ {
			specs = append(specs, podSpec{fmt.Sprintf("%s-%02d", node, j), node, "300m", "1Gi", "static"})
		}
	}
	if pool > 0 {
		for _, node := range poolNodes {
			for j := 0; j < podsPerNode; j++ {
				specs = append(specs, podSpec{fmt.Sprintf("%s-%02d", node, j), node, "60m", "200Mi", "pool"})
			}
		}
	}
	existing := &metav1.PartialObjectMetadataList{}
	existing.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	if err := h.mgmt.List(ctx, existing, client.InNamespace(namespace), client.HasLabels{roleLabel}); err != nil {
		return err
	}
	have := map[string]bool{}
	for _, p := range existing.Items {
		have[p.Name] = true
	}
	var todo []podSpec
	for _, s := range specs {
		if !have[s.name] {
			todo = append(todo, s)
		}
	}
	h.logf("creating %d pods (%d exist)", len(todo), len(have))
	owners := map[int]metav1.OwnerReference{}
	for i := 0; i < len(todo); i += 50 {
		ref, err := h.owner(ctx, fmt.Sprintf("owner-%s-%d-%d", staticPrefix, len(have), i/50))
		if err != nil {
			return err
		}
		owners[i/50] = ref
	}
	started = time.Now()
	var created atomic.Int64
	stopProgress := h.every(ctx, 15*time.Second, func() {
		h.logf("  pods created: %d/%d (%s)", created.Load(), len(todo), time.Since(started).Round(time.Second))
	})
	err = parallel(ctx, len(todo), 32, func(ctx context.Context, i int) error {
		s := todo[i]
		p := pod(s.name, owners[i/50], map[string]string{roleLabel: s.role, "owner": owners[i/50].Name}, s.node, s.cpu, s.memory, nil)
		err := h.mgmt.Create(ctx, p)
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		created.Add(1)
		return nil
	})
	stopProgress()
	if err != nil {
		return fmt.Errorf("creating pods: %w", err)
	}
	h.logf("created %d pods in %s", len(todo), time.Since(started).Round(time.Second))
	if !h.opts.waitRunning {
		// The engine counts a pod bound to a node as placed, Running or not.
		return nil
	}
	// kwok marks them Running. Each count lists every pod: polling often
	// would slow the API server that kwok needs.
	return wait.PollUntilContextTimeout(ctx, 20*time.Second, 30*time.Minute, true, func(ctx context.Context) (bool, error) {
		running, err := h.countRunning(ctx)
		if err != nil {
			return pollAgain(err)
		}
		h.logf("  pods running: %d/%d", running, len(specs))
		return running >= len(specs), nil
	})
}

func (h *harness) countRunning(ctx context.Context) (int, error) {
	running := 0
	list := &corev1.PodList{}
	cont := ""
	for {
		if err := h.mgmt.List(ctx, list, client.InNamespace(namespace), client.HasLabels{roleLabel}, client.Limit(5000), client.Continue(cont)); err != nil {
			return 0, err
		}
		for i := range list.Items {
			if list.Items[i].Status.Phase == corev1.PodRunning {
				running++
			}
		}
		if cont = list.Continue; cont == "" {
			return running, nil
		}
	}
}

func hasPrefix(s, prefix string) bool { return len(s) >= len(prefix) && s[:len(prefix)] == prefix }

// setReplicas sets a MachineDeployment's replicas.
func (h *harness) setReplicas(ctx context.Context, name string, replicas int32) error {
	patch := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas))
	md := &clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	return h.mgmt.Patch(ctx, md, client.RawPatch(types.MergePatchType, patch))
}

// workloadCluster is the API server of one Cluster in multi-cluster mode.
type workloadCluster struct {
	*localstack.Cluster
	// client is the harness's, with a high rate limit.
	client client.Client
	// host is the host:port the manager reaches it at: its requests
	// there are counted under this host.
	host string
}

// startWorkloads starts, in multi-cluster mode, one API server per Cluster
// and creates the Cluster's kubeconfig Secret pointing at it, before the
// Cluster exists: the simulated control plane writes one only when it is
// missing, else pointing at the shared workload API server.
func (h *harness) startWorkloads(ctx context.Context, stack *localstack.Stack, clusters []string) (map[string]*workloadCluster, error) {
	h.logf("starting %d workload API servers", len(clusters))
	started := time.Now()
	workloads := make([]*workloadCluster, len(clusters))
	// A starting API server is busy for seconds: a few at a time.
	err := parallel(ctx, len(clusters), 4, func(ctx context.Context, i int) error {
		apiServer, err := stack.StartAPIServerWithOptions(ctx, clusters[i], h.opts.workloadAPIServer)
		if err != nil {
			return err
		}
		if workloads[i], err = newWorkloadCluster(apiServer); err != nil {
			return err
		}
		return h.mgmt.Create(ctx, kubeconfigSecret(clusters[i], apiServer.Kubeconfig))
	})
	if err != nil {
		return nil, fmt.Errorf("starting the workload API servers: %w", err)
	}
	h.row("| %d workload API servers started | %s | %s | load %s |", len(clusters), time.Since(started).Round(time.Second), h.workloadTuning(), loadavg())
	out := map[string]*workloadCluster{}
	for i, c := range clusters {
		out[c] = workloads[i]
	}
	return out, nil
}

func newWorkloadCluster(apiServer *localstack.Cluster) (*workloadCluster, error) {
	cfg := rest.CopyConfig(apiServer.Config)
	cfg.QPS, cfg.Burst = 2000, 4000
	// A request to a saturated API server fails rather than holding up the
	// churn of its cluster.
	cfg.Timeout = 30 * time.Second
	c, err := client.New(cfg, client.Options{Scheme: localstack.Scheme})
	if err != nil {
		return nil, err
	}
	// The manager reads the kubeconfig the Cluster's Secret holds.
	managerCfg, err := clientcmd.RESTConfigFromKubeConfig(apiServer.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("the kubeconfig of %s: %w", apiServer.Name, err)
	}
	server, err := url.Parse(managerCfg.Host)
	if err != nil {
		return nil, fmt.Errorf("the server of %s: %w", apiServer.Name, err)
	}
	return &workloadCluster{Cluster: apiServer, client: c, host: server.Host}, nil
}

// workloadTuning says how the workload API servers were tuned.
func (h *harness) workloadTuning() string {
	t := h.opts.workloadAPIServer
	if len(t.ExtraArgs)+len(t.Env) == 0 {
		return "default flags"
	}
	return fmt.Sprintf("tuned: `%s`", strings.Join(append(slices.Clone(t.Env), t.ExtraArgs...), " "))
}

// kubeconfigSecret is the Cluster's kubeconfig Secret as a control plane
// provider writes it (util/kubeconfig.GenerateSecretWithOwner), with no
// owner: the Cluster does not exist yet.
func kubeconfigSecret(cluster string, kubeconfig []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: secret.Name(cluster, secret.Kubeconfig),
			Labels: map[string]string{clusterv1.ClusterNameLabel: cluster},
		},
		Type: clusterv1.ClusterSecretType,
		Data: map[string][]byte{secret.KubeconfigDataName: kubeconfig},
	}
}

// populateWorkload fills a workload API server of its own, where nothing
// else runs, with nodes static Nodes (as populate does) and podsPerNode
// pods on each, bound directly: it makes the Nodes Ready and removes the
// not-ready taint (kwok's and the node lifecycle controller's work) and
// marks the pods Running (the kubelet's). Nothing changes them afterwards.
func (h *harness) populateWorkload(ctx context.Context, workload *workloadCluster, nodes, podsPerNode int) error {
	c := workload.client
	// The pods' ServiceAccount, which no controller creates here.
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "default"}},
	} {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
	}
	h.logf("%s: creating %d static nodes and %d pods", workload.Name, nodes, nodes*podsPerNode)
	started := time.Now()
	if err := parallel(ctx, nodes, 16, func(ctx context.Context, i int) error {
		return localstack.CreateReadyNode(ctx, c, staticNode(fmt.Sprintf("static-%05d", i)))
	}); err != nil {
		return fmt.Errorf("creating static nodes: %w", err)
	}
	// Owners: one ConfigMap per 50 pods, as populate does.
	pods := nodes * podsPerNode
	owners := make([]metav1.OwnerReference, (pods+49)/50)
	for i := range owners {
		var err error
		if owners[i], err = createOwner(ctx, c, fmt.Sprintf("owner-static-%d", i)); err != nil {
			return err
		}
	}
	if err := parallel(ctx, pods, 32, func(ctx context.Context, i int) error {
		node, owner := fmt.Sprintf("static-%05d", i/podsPerNode), owners[i/50]
		p := pod(fmt.Sprintf("%s-%02d", node, i%podsPerNode), owner, map[string]string{roleLabel: "static", "owner": owner.Name}, node, "300m", "1Gi", nil)
		return createRunningPod(ctx, c, p)
	}); err != nil {
		return fmt.Errorf("creating pods: %w", err)
	}
	h.logf("%s: populated in %s", workload.Name, time.Since(started).Round(time.Millisecond))
	return nil
}

// createRunningPod creates p, bound to its node, and reports it Running
// and Ready through the status subresource, as the kubelet does.
func createRunningPod(ctx context.Context, c client.Client, p *corev1.Pod) error {
	if err := c.Create(ctx, p); err != nil {
		return err
	}
	now := metav1.Now()
	p.Status.Phase = corev1.PodRunning
	p.Status.StartTime = &now
	for _, t := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	if err := c.Status().Update(ctx, p); err != nil {
		return fmt.Errorf("marking pod %s Running: %w", p.Name, err)
	}
	return nil
}

// createUnschedulablePod creates p, unbound, and reports it unschedulable
// through the status subresource, as the scheduler does for a pod that
// fits none of the cluster's nodes.
func createUnschedulablePod(ctx context.Context, c client.Client, p *corev1.Pod, nodes int) error {
	if err := c.Create(ctx, p); err != nil {
		return err
	}
	p.Status.Conditions = []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message:            fmt.Sprintf("0/%d nodes are available: %d Insufficient cpu.", nodes, nodes),
		LastTransitionTime: metav1.Now(),
	}}
	if err := c.Status().Update(ctx, p); err != nil {
		return fmt.Errorf("marking pod %s unschedulable: %w", p.Name, err)
	}
	return nil
}
