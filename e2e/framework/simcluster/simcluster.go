// Package simcluster creates workload Clusters of the simulated
// infrastructure provider (e2e/framework/infrastructure) on the local
// stack (e2e/framework/localstack) and runs the autoscaler manager against
// it, with no Ginkgo: the commands in hack/demo and hack/perf share it.
package simcluster

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// KubernetesVersion is the version of the simulated Nodes.
const KubernetesVersion = "v1.36.3"

// ManagerProcess is the name StartManager runs the manager under on the
// stack, and so the name of its log file, ManagerProcess+".log", in the
// stack's LogDir.
const ManagerProcess = "capi-autoscaler"

// BootstrapSecretName is the bootstrap data Secret the Machines of a
// Cluster boot from.
func BootstrapSecretName(cluster string) string { return cluster + "-bootstrap" }

// ClusterObjects are the objects of a Cluster of the simulated provider,
// without its node groups: the Machines' bootstrap data Secret, and the
// SimCluster, SimControlPlane and Cluster, all named cluster, in namespace.
func ClusterObjects(namespace, cluster string) []client.Object {
	return []client.Object{
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: BootstrapSecretName(cluster)},
			Type:       clusterv1.ClusterSecretType,
			Data:       map[string][]byte{"value": []byte("#!/bin/true\n"), "format": []byte("cloud-config")},
		},
		&infrav1.SimCluster{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: cluster}},
		&infrav1.SimControlPlane{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: cluster}},
		&clusterv1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: cluster},
			Spec: clusterv1.ClusterSpec{
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "SimCluster", Name: cluster},
				ControlPlaneRef:   clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "SimControlPlane", Name: cluster},
			},
		},
	}
}

// NodeGroup describes an autoscaled MachineDeployment of a Cluster and the
// SimMachineTemplate of the same name its Machines are made from.
type NodeGroup struct {
	// Namespace and Name of both the MachineDeployment and the template.
	Namespace, Name string
	// Cluster is the name of the Cluster the group belongs to.
	Cluster string
	// MinSize and MaxSize are the autoscaler's bounds of the group.
	MinSize, MaxSize int32
	// Replicas of the MachineDeployment; when nil, Cluster API defaults
	// them to MinSize.
	Replicas *int32
	// Annotations are added to the MachineDeployment's min and max size
	// annotations.
	Annotations map[string]string
	// CPU, Memory and Pods are the capacity of the group's Nodes, as
	// quantities.
	CPU, Memory, Pods string
	// NodeLabels are set on the group's Nodes.
	NodeLabels map[string]string
	// Provisioning is how the group's Machines provision; empty is the
	// provider's default.
	Provisioning infrav1.ProvisioningBehavior
}

// MachineTemplate is the SimMachineTemplate of the group.
func (g NodeGroup) MachineTemplate() *infrav1.SimMachineTemplate {
	return &infrav1.SimMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: g.Namespace, Name: g.Name},
		Spec: infrav1.SimMachineTemplateSpec{Template: infrav1.SimMachineTemplateResource{Spec: infrav1.SimMachineSpec{
			Capacity: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse(g.CPU),
				corev1.ResourceMemory: resource.MustParse(g.Memory),
				corev1.ResourcePods:   resource.MustParse(g.Pods),
			},
			NodeLabels:   g.NodeLabels,
			Provisioning: g.Provisioning,
		}}},
	}
}

// MachineDeployment is the MachineDeployment of the group, with the
// autoscaler's min and max size annotations.
func (g NodeGroup) MachineDeployment() *clusterv1.MachineDeployment {
	annotations := map[string]string{
		clusterv1.AutoscalerMinSizeAnnotation: strconv.Itoa(int(g.MinSize)),
		clusterv1.AutoscalerMaxSizeAnnotation: strconv.Itoa(int(g.MaxSize)),
	}
	for k, v := range g.Annotations {
		annotations[k] = v
	}
	return &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: g.Namespace, Name: g.Name, Annotations: annotations},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: g.Cluster,
			Replicas:    g.Replicas,
			Template: clusterv1.MachineTemplateSpec{
				Spec: clusterv1.MachineSpec{
					ClusterName:       g.Cluster,
					Version:           KubernetesVersion,
					Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To(BootstrapSecretName(g.Cluster))},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "SimMachineTemplate", Name: g.Name},
				},
			},
		},
	}
}

// WaitForCluster polls every second, for at most timeout, until Cluster API
// reports the Cluster namespace/name provisioned and its control plane
// initialized. Read errors are retried until the timeout.
func WaitForCluster(ctx context.Context, c client.Reader, namespace, name string, timeout time.Duration) error {
	cluster := &clusterv1.Cluster{}
	return wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, cluster)
		return err == nil && ptr.Deref(cluster.Status.Initialization.InfrastructureProvisioned, false) &&
			ptr.Deref(cluster.Status.Initialization.ControlPlaneInitialized, false), nil
	})
}

// NewScheme knows the Kubernetes, Cluster API, simulated provider and
// ClusterAutoscaler APIs; the local stack's own clients do not know the
// last.
func NewScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, clusterv1.AddToScheme, infrav1.AddToScheme, autoscalingv1alpha1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	return scheme, nil
}

// SetLogger makes a text logger writing to w at verbosity the logger of
// controller-runtime and klog, so of the simulated provider that runs in
// this process, and returns ctx carrying it.
func SetLogger(ctx context.Context, w io.Writer, verbosity int) context.Context {
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(w), textlogger.Verbosity(verbosity)))
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)
	return ctrl.LoggerInto(ctx, logger)
}

// FreeLocalAddress is a loopback address with a port free right now.
func FreeLocalAddress() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// StartManager runs the manager binary on the stack as ManagerProcess,
// against the management cluster, serving its metrics over plain HTTP on
// metricsAddress and no health probes.
func StartManager(ctx context.Context, stack *localstack.Stack, binary, metricsAddress string, extraArgs ...string) (*localstack.Process, error) {
	return StartNamedManager(ctx, stack, ManagerProcess, binary, metricsAddress, extraArgs...)
}

// StartNamedManager is StartManager for one of several managers: the
// process, and so its log, is called name.
func StartNamedManager(ctx context.Context, stack *localstack.Stack, name, binary, metricsAddress string, extraArgs ...string) (*localstack.Process, error) {
	args := append([]string{
		"--kubeconfig=" + stack.Management.KubeconfigPath,
		"--diagnostics-address=" + metricsAddress,
		"--insecure-diagnostics",
		"--health-probe-bind-address=0",
	}, extraArgs...)
	return stack.StartProcess(ctx, name, binary, args...)
}

// ManagerLog is the log file of the manager StartManager runs.
func ManagerLog(stack *localstack.Stack) string {
	return filepath.Join(stack.LogDir(), ManagerProcess+".log")
}
