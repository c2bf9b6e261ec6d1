package agreement

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/clustergen"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// workers is how many objects are created at once.
const workers = 16

// populate creates the generated cluster but its pending pods, in the
// state its controllers and kubelets would leave it: Nodes Ready without
// the not-ready taint, claims and volumes bound, bound pods Running, their
// resource claims allocated and reserved for them.
func populate(ctx context.Context, c client.Client, gen *clustergen.Cluster) error {
	for _, ns := range gen.Namespaces {
		// The pods' ServiceAccount, which no controller creates here.
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "default"}}
		if err := create(ctx, c, ns.DeepCopy(), sa); err != nil {
			return err
		}
	}
	if err := forEach(ctx, gen.Nodes, func(ctx context.Context, node *corev1.Node) error {
		return localstack.CreateReadyNode(ctx, c, node.DeepCopy())
	}); err != nil {
		return err
	}
	for _, objects := range [][]client.Object{objects(gen.CSINodes), objects(gen.StorageClasses), objects(gen.DeviceClasses), objects(gen.ResourceSlices)} {
		if err := forEach(ctx, objects, func(ctx context.Context, obj client.Object) error { return create(ctx, c, obj) }); err != nil {
			return err
		}
	}
	claimUIDs := map[string]types.UID{}
	for _, claim := range gen.PersistentVolumeClaims {
		claim = claim.DeepCopy()
		status := claim.Status
		if err := createWithStatus(ctx, c, claim, func() { claim.Status = status }); err != nil {
			return err
		}
		claimUIDs[claim.Namespace+"/"+claim.Name] = claim.UID
	}
	if err := forEach(ctx, gen.PersistentVolumes, func(ctx context.Context, volume *corev1.PersistentVolume) error {
		volume = volume.DeepCopy()
		if ref := volume.Spec.ClaimRef; ref != nil {
			ref.UID = claimUIDs[ref.Namespace+"/"+ref.Name]
		}
		status := volume.Status
		return createWithStatus(ctx, c, volume, func() { volume.Status = status })
	}); err != nil {
		return err
	}
	podUIDs, err := createBoundPods(ctx, c, gen.BoundPods)
	if err != nil {
		return err
	}
	return forEach(ctx, gen.ResourceClaims, func(ctx context.Context, claim *resourceapi.ResourceClaim) error {
		return createResourceClaim(ctx, c, claim, podUIDs)
	})
}

// createBoundPods creates the bound pods, Running, and returns their UIDs
// by namespace/name.
func createBoundPods(ctx context.Context, c client.Client, bound []*corev1.Pod) (map[string]types.UID, error) {
	pods := make([]*corev1.Pod, len(bound))
	for i, pod := range bound {
		pods[i] = pod.DeepCopy()
	}
	if err := forEach(ctx, pods, func(ctx context.Context, pod *corev1.Pod) error {
		status := pod.Status
		return createWithStatus(ctx, c, pod, func() { pod.Status = status })
	}); err != nil {
		return nil, err
	}
	uids := make(map[string]types.UID, len(pods))
	for _, pod := range pods {
		uids[pod.Namespace+"/"+pod.Name] = pod.UID
	}
	return uids, nil
}

// createResourceClaim creates a claim, and writes the allocation of one
// allocated to bound pods, reserved for them by their UIDs.
func createResourceClaim(ctx context.Context, c client.Client, claim *resourceapi.ResourceClaim, podUIDs map[string]types.UID) error {
	claim = claim.DeepCopy()
	status := claim.Status
	if status.Allocation == nil {
		return create(ctx, c, claim)
	}
	for i := range status.ReservedFor {
		status.ReservedFor[i].UID = podUIDs[claim.Namespace+"/"+status.ReservedFor[i].Name]
	}
	return createWithStatus(ctx, c, claim, func() { claim.Status = status })
}

// createWithStatus creates obj, then writes the status that restore puts
// back: creating drops it.
func createWithStatus(ctx context.Context, c client.Client, obj client.Object, restore func()) error {
	if err := create(ctx, c, obj); err != nil {
		return err
	}
	restore()
	if err := c.Status().Update(ctx, obj); err != nil {
		return fmt.Errorf("writing the status of %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
	}
	return nil
}

func create(ctx context.Context, c client.Client, objs ...client.Object) error {
	for _, obj := range objs {
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("creating %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
		}
	}
	return nil
}

// forEach runs fn for each item, a few at a time, and returns the first
// error.
func forEach[T any](ctx context.Context, items []T, fn func(context.Context, T) error) error {
	group, ctx := errgroup.WithContext(ctx)
	group.SetLimit(workers)
	for _, item := range items {
		group.Go(func() error { return fn(ctx, item) })
	}
	return group.Wait()
}

// objects converts generated objects, copied, to client objects.
func objects[T client.Object](items []T) []client.Object {
	out := make([]client.Object, 0, len(items))
	for _, item := range items {
		out = append(out, item.DeepCopyObject().(client.Object))
	}
	return out
}
