package compare

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/log"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/fake"
	"sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	"sigs.k8s.io/karpenter/pkg/events"
	"sigs.k8s.io/karpenter/pkg/operator/injection"
	"sigs.k8s.io/karpenter/pkg/operator/logging"
	"sigs.k8s.io/karpenter/pkg/operator/options"
	"sigs.k8s.io/karpenter/pkg/test"
)

func init() {
	log.SetLogger(logging.NopLogger)
}

// KarpenterContext is ctx with what Karpenter's provisioner reads from
// it: its controller name and its default options.
func KarpenterContext(ctx context.Context) context.Context {
	return options.ToContext(injection.WithControllerName(ctx, "provisioner"), test.Options())
}

// NewKarpenterScheduler is Karpenter's scheduler for pods, set up as
// Karpenter's own benchmark does: one NodePool without limits over the
// instance types, no existing nodes. ctx comes from KarpenterContext.
func NewKarpenterScheduler(ctx context.Context, instanceTypes []*cloudprovider.InstanceType, pods []*corev1.Pod) (*scheduling.Scheduler, error) {
	nodePool := test.NodePool(karpv1.NodePool{Spec: karpv1.NodePoolSpec{Limits: karpv1.Limits{
		corev1.ResourceCPU:    resource.MustParse("10000000"),
		corev1.ResourceMemory: resource.MustParse("10000000Gi"),
	}}})
	cloudProvider := fake.NewCloudProvider()
	cloudProvider.InstanceTypes = instanceTypes
	byPool := map[string][]*cloudprovider.InstanceType{nodePool.Name: instanceTypes}
	client := fakeclient.NewFakeClient()
	cluster := state.NewCluster(clock.RealClock{}, client, cloudProvider)
	topology, err := scheduling.NewTopology(ctx, client, cluster, nil, []*karpv1.NodePool{nodePool}, byPool, pods,
		scheduling.NumConcurrentReconciles(5))
	if err != nil {
		return nil, err
	}
	return scheduling.NewScheduler(ctx, client, []*karpv1.NodePool{nodePool}, cluster, nil, topology, byPool, nil,
		events.NewRecorder(&record.FakeRecorder{}), clock.RealClock{}, nil, nil, scheduling.NumConcurrentReconciles(5)), nil
}
