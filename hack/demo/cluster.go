package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/simcluster"
)

const (
	// namespace holds the demo's objects, in both clusters.
	namespace = "demo"
	// clusterName is the workload Cluster, and its ClusterAutoscaler.
	clusterName = "demo"
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
	objects := simcluster.ClusterObjects(namespace, clusterName)
	for _, group := range nodeGroups {
		spec := group.spec()
		objects = append(objects, spec.MachineTemplate(), spec.MachineDeployment())
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
	err := simcluster.WaitForCluster(ctx, d.mgmt, namespace, clusterName, d.timeout)
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

// spec is the group's MachineDeployment and SimMachineTemplate: replicas
// defaulted to the min size, Nodes with room for 110 pods.
func (g nodeGroup) spec() simcluster.NodeGroup {
	return simcluster.NodeGroup{
		Namespace: namespace, Name: g.name, Cluster: clusterName,
		MinSize: g.min, MaxSize: g.max,
		CPU: g.cpu, Memory: g.memory, Pods: "110",
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
