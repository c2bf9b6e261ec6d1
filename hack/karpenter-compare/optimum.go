package compare

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/fake"
	"sigs.k8s.io/karpenter/pkg/scheduling"

	"github.com/capi-autoscaler/capi-autoscaler/hack/optimum"
)

// Karpenter is Karpenter's scheduler as an optimum.Planner: one Solve of
// the mix's pods over an instance type per node group, offered on demand
// in the group's zone at its price, with the group's capacity and the
// overhead the mix's allocatable leaves out. A NodeClaim launches as the
// cheapest instance type among its options, as Karpenter launches it.
type Karpenter struct{}

// Name implements optimum.Planner.
func (Karpenter) Name() string { return "karpenter" }

// Place implements optimum.Planner.
func (Karpenter) Place(ctx context.Context, m *optimum.Mix) (*optimum.Placement, error) {
	ctx = KarpenterContext(ctx)
	instanceTypes := make([]*cloudprovider.InstanceType, 0, len(m.Groups))
	for _, group := range m.Groups {
		instanceTypes = append(instanceTypes, fake.NewInstanceType(group.Name,
			fake.WithResources(corev1.ResourceList{
				corev1.ResourceCPU:    *resource.NewMilliQuantity(group.MilliCPU+optimum.KubeReservedMilliCPU, resource.DecimalSI),
				corev1.ResourceMemory: resource.MustParse(fmt.Sprintf("%dMi", group.MemoryMiB+optimum.KubeReservedMemoryMiB)),
				corev1.ResourcePods:   resource.MustParse("110"),
			}),
			fake.WithOfferings(cloudprovider.Offering{
				Available: true,
				Price:     float64(group.Price) / 1e6,
				Requirements: scheduling.NewLabelRequirements(map[string]string{
					karpv1.CapacityTypeLabelKey: karpv1.CapacityTypeOnDemand,
					corev1.LabelTopologyZone:    group.Zone,
				}),
			})))
	}
	pods := m.KubePods()
	scheduler, err := NewKarpenterScheduler(ctx, instanceTypes, pods)
	if err != nil {
		return nil, err
	}
	results, err := scheduler.Solve(ctx, pods)
	if err != nil {
		return nil, err
	}
	placement := &optimum.Placement{Unplaced: len(results.PodErrors)}
	for _, claim := range results.NewNodeClaims {
		options := claim.InstanceTypeOptions.Compatible(claim.Requirements).OrderByPrice(claim.Requirements)
		if len(options) == 0 {
			return nil, fmt.Errorf("a NodeClaim for %d pods has no instance type to launch as", len(claim.Pods))
		}
		g := m.GroupIndex(options[0].Name)
		if g < 0 {
			return nil, fmt.Errorf("a NodeClaim launches as %s, not a group of the mix", options[0].Name)
		}
		node := optimum.Node{Group: g}
		for _, pod := range claim.Pods {
			node.Pods = append(node.Pods, m.AppOf(pod))
		}
		placement.Nodes = append(placement.Nodes, node)
	}
	return placement, nil
}
