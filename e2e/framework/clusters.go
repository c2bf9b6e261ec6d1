package framework

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// KubernetesVersion is the version of the simulated Nodes.
const KubernetesVersion = "v1.36.3"

// Intervals used with Eventually.
var (
	ClusterReadyTimeout = 1 * time.Minute
	NodesReadyTimeout   = 2 * time.Minute
	DeletionTimeout     = 2 * time.Minute
	PollInterval        = 250 * time.Millisecond
)

// CreateSimulatedClusterInput describes a Cluster of the simulated provider.
type CreateSimulatedClusterInput struct {
	// Client talks to the management cluster.
	Client    client.Client
	Namespace string
	Name      string

	// FailureDomains of the SimCluster; Machines placed in one get it as
	// their Node's zone.
	FailureDomains []string

	// WorkloadKubeconfig reaches the workload cluster as the autoscaler
	// does there (WorkloadServiceAccount); it goes to the Secret that
	// FastClusterAutoscalerSpec names.
	WorkloadKubeconfig []byte

	// Labels of the Cluster, e.g. cluster.x-k8s.io/watch-filter.
	Labels map[string]string
}

// CreateSimulatedCluster creates a Cluster with a SimCluster and a
// SimControlPlane, the bootstrap data Secret its Machines boot from and the
// Secret of the autoscaler's workload kubeconfig, and waits until Cluster
// API reports it provisioned and initialized.
func CreateSimulatedCluster(ctx context.Context, input CreateSimulatedClusterInput) *clusterv1.Cluster {
	Expect(input.WorkloadKubeconfig).NotTo(BeEmpty(), "CreateSimulatedCluster needs the autoscaler's workload kubeconfig")
	c := input.Client
	Expect(c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: input.Namespace, Name: BootstrapSecretName(input.Name)},
		Type:       clusterv1.ClusterSecretType,
		Data:       map[string][]byte{"value": []byte("#!/bin/true\n"), "format": []byte("cloud-config")},
	})).To(Succeed())
	Expect(c.Create(ctx, WorkloadKubeconfigSecret(input.Namespace, WorkloadKubeconfigSecretName(input.Name), input.Name, input.WorkloadKubeconfig))).To(Succeed())
	Expect(c.Create(ctx, &infrav1.SimCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: input.Namespace, Name: input.Name},
		Spec:       infrav1.SimClusterSpec{FailureDomains: input.FailureDomains},
	})).To(Succeed())
	Expect(c.Create(ctx, &infrav1.SimControlPlane{
		ObjectMeta: metav1.ObjectMeta{Namespace: input.Namespace, Name: input.Name},
	})).To(Succeed())
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: input.Namespace, Name: input.Name, Labels: input.Labels},
		Spec: clusterv1.ClusterSpec{
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "SimCluster", Name: input.Name},
			ControlPlaneRef:   clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "SimControlPlane", Name: input.Name},
		},
	}
	Expect(c.Create(ctx, cluster)).To(Succeed())

	Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(cluster), cluster)).To(Succeed())
		g.Expect(cluster.Status.Initialization.InfrastructureProvisioned).To(HaveValue(BeTrue()))
		g.Expect(cluster.Status.Initialization.ControlPlaneInitialized).To(HaveValue(BeTrue()))
	}, ClusterReadyTimeout, PollInterval).Should(Succeed(), "Cluster %s/%s is not provisioned", input.Namespace, input.Name)
	return cluster
}

// BootstrapSecretName is the bootstrap data Secret of a simulated Cluster's
// Machines.
func BootstrapSecretName(clusterName string) string {
	return clusterName + "-bootstrap"
}

// WorkloadKubeconfigSecret is a Secret that spec.workloadKubeconfigSecretRef
// may name for a Cluster: of Cluster API's type, labelled with the
// Cluster's name, with kubeconfig under the key "value".
func WorkloadKubeconfigSecret(namespace, name, cluster string, kubeconfig []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: cluster}},
		Type:       clusterv1.ClusterSecretType,
		Data:       map[string][]byte{secret.KubeconfigDataName: kubeconfig},
	}
}

// WorkloadKubeconfigSecretName is the Secret of a simulated Cluster that
// holds the autoscaler's workload kubeconfig, for WorkloadServiceAccount.
func WorkloadKubeconfigSecretName(clusterName string) string {
	return clusterName + "-autoscaler-kubeconfig"
}

// DeleteCluster deletes cluster and waits until Cluster API deleted it.
func DeleteCluster(ctx context.Context, c client.Client, cluster *clusterv1.Cluster) {
	By("Deleting the Cluster")
	Expect(c.Delete(ctx, cluster)).To(Succeed())
	Eventually(func() error {
		return c.Get(ctx, client.ObjectKeyFromObject(cluster), &clusterv1.Cluster{})
	}, DeletionTimeout, PollInterval).Should(Satisfy(apierrors.IsNotFound))
}

// ClusterLabel, set on the Machines of a spec's node groups, is propagated
// by Cluster API to their Nodes. The spec's pods select it: in the
// self-hosted topology every Cluster's Nodes share one API server and one
// scheduler.
const ClusterLabel = "e2e.node.cluster.x-k8s.io/cluster"

// SpecNamespace is the namespace of one spec: in the management cluster for
// its Cluster API objects and, under the same name, in the workload cluster
// for its pods.
type SpecNamespace struct {
	Name string
}

// CreateSpecNamespace creates a namespace named prefix-<random> in the
// management and the workload cluster of stack, and deletes it again after
// the spec.
func CreateSpecNamespace(ctx context.Context, stack *localstack.Stack, prefix string) SpecNamespace {
	name := prefix + "-" + rand.String(6)
	clients := []client.Client{stack.Management.Client}
	if stack.Workload != stack.Management {
		clients = append(clients, stack.Workload.Client)
	}
	for _, c := range clients {
		namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		Expect(c.Create(ctx, namespace)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(c.Delete(ctx, namespace))).To(Succeed())
		})
	}
	return SpecNamespace{Name: name}
}
