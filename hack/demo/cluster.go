package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/infrastructure/api/v1alpha1"
)

const (
	// namespace holds the demo's objects, in both clusters.
	namespace = "demo"
	// clusterName is the workload Cluster, and its ClusterAutoscaler.
	clusterName = "demo"
	// kubernetesVersion is the version of the simulated Nodes.
	kubernetesVersion = "v1.36.3"
	// unneededTime is how long a node must be unneeded before it goes.
	unneededTime = 20 * time.Second
)

// nodeGroup is one autoscaled MachineDeployment of the demo.
type nodeGroup struct {
	name     string
	min, max int32
	cpu      string
	memory   string
}

// nodeGroups start at their min size: Cluster API defaults the replicas of
// a new MachineDeployment with autoscaler annotations to the min size.
// md-large starts empty: the autoscaler builds its template node from the
// SimMachineTemplate's status.capacity.
var nodeGroups = []nodeGroup{
	{name: "md-general", min: 1, max: 6, cpu: "2", memory: "4Gi"},
	{name: "md-large", min: 0, max: 3, cpu: "8", memory: "32Gi"},
}

// createCluster creates the workload Cluster of the simulated provider and
// its node groups, and waits until the min size of each group is Ready.
func (d *demo) createCluster(ctx context.Context) error {
	d.progress.step("Creating Cluster %s/%s with MachineDeployments %s (min %d, max %d) and %s (min %d, max %d)", namespace, clusterName,
		nodeGroups[0].name, nodeGroups[0].min, nodeGroups[0].max, nodeGroups[1].name, nodeGroups[1].min, nodeGroups[1].max)
	started := time.Now()
	if err := createNamespace(ctx, d.mgmt); err != nil {
		return err
	}
	if d.separate {
		if err := createNamespace(ctx, d.workload); err != nil {
			return err
		}
	}
	objects := []client.Object{
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: bootstrapSecretName},
			Type:       clusterv1.ClusterSecretType,
			Data:       map[string][]byte{"value": []byte("#!/bin/true\n"), "format": []byte("cloud-config")},
		},
		&infrav1.SimCluster{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: clusterName}},
		&infrav1.SimControlPlane{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: clusterName}},
		&clusterv1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: clusterName},
			Spec: clusterv1.ClusterSpec{
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "SimCluster", Name: clusterName},
				ControlPlaneRef:   clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "SimControlPlane", Name: clusterName},
			},
		},
	}
	for _, group := range nodeGroups {
		objects = append(objects, group.machineTemplate(), group.machineDeployment())
	}
	for _, obj := range objects {
		if err := d.mgmt.Create(ctx, obj); err != nil {
			return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
	}

	if err := d.waitForCluster(ctx); err != nil {
		return err
	}
	_, err := d.watch(ctx, "Waiting for the node groups", started, func(s *state) bool {
		for _, row := range s.groups {
			if row.nodeCapacity == "" || row.replicas != row.min || row.ready != row.min {
				return false
			}
		}
		return s.readyNodes == s.nodes
	})
	if err != nil {
		return fmt.Errorf("the node groups did not reach their min size: %w", err)
	}
	d.progress.done("Cluster ready with its node groups at their min size (%s)", since(started))
	return nil
}

// waitForCluster waits until Cluster API reports the Cluster provisioned
// and its control plane initialized.
func (d *demo) waitForCluster(ctx context.Context) error {
	cluster := &clusterv1.Cluster{}
	err := wait.PollUntilContextTimeout(ctx, time.Second, d.timeout, true, func(ctx context.Context) (bool, error) {
		// Errors are retried until the timeout.
		err := d.mgmt.Get(ctx, client.ObjectKey{Namespace: namespace, Name: clusterName}, cluster)
		return err == nil && ptr.Deref(cluster.Status.Initialization.InfrastructureProvisioned, false) &&
			ptr.Deref(cluster.Status.Initialization.ControlPlaneInitialized, false), nil
	})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("the Cluster %s/%s was not provisioned within %s", namespace, clusterName, d.timeout)
	}
	return err
}

func createNamespace(ctx context.Context, c client.Client) error {
	err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", namespace, err)
	}
	return nil
}

// bootstrapSecretName is the bootstrap data Secret the Machines boot from.
const bootstrapSecretName = clusterName + "-bootstrap"

func (g nodeGroup) machineTemplate() *infrav1.SimMachineTemplate {
	return &infrav1.SimMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: g.name},
		Spec: infrav1.SimMachineTemplateSpec{Template: infrav1.SimMachineTemplateResource{Spec: infrav1.SimMachineSpec{
			Capacity: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse(g.cpu),
				corev1.ResourceMemory: resource.MustParse(g.memory),
				corev1.ResourcePods:   resource.MustParse("110"),
			},
		}}},
	}
}

func (g nodeGroup) machineDeployment() *clusterv1.MachineDeployment {
	return &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace,
			Name:      g.name,
			Annotations: map[string]string{
				clusterv1.AutoscalerMinSizeAnnotation: strconv.Itoa(int(g.min)),
				clusterv1.AutoscalerMaxSizeAnnotation: strconv.Itoa(int(g.max)),
			},
		},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: clusterName,
			Template: clusterv1.MachineTemplateSpec{
				Spec: clusterv1.MachineSpec{
					ClusterName:       clusterName,
					Version:           kubernetesVersion,
					Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To(bootstrapSecretName)},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "SimMachineTemplate", Name: g.name},
				},
			},
		},
	}
}

// newClusterAutoscaler turns autoscaling on, with timings short enough to
// watch: a loop every second and no delay between a scale-up and the next
// scale-down.
func newClusterAutoscaler() *autoscalingv1alpha1.ClusterAutoscaler {
	return &autoscalingv1alpha1.ClusterAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: clusterName},
		Spec: autoscalingv1alpha1.ClusterAutoscalerSpec{
			ClusterName:              clusterName,
			ScanInterval:             &metav1.Duration{Duration: time.Second},
			BalanceSimilarNodeGroups: ptr.To(false),
			Expanders:                []autoscalingv1alpha1.Expander{autoscalingv1alpha1.LeastWasteExpander},
			ScaleDown: &autoscalingv1alpha1.ScaleDownConfig{
				DelayAfterAdd: &metav1.Duration{},
				UnneededTime:  &metav1.Duration{Duration: unneededTime},
			},
		},
	}
}
