// The read phase of a loop: the node groups, the cluster, its capacity
// buffers and provisioning requests into one snapshot. Reads only read:
// what they find to write is carried out by the actuation at the end of
// the loop.

package autoscaler

import (
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourcev1 "k8s.io/api/resource/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// refresh reads the node groups and the cluster and updates the cluster state.
func (s *steps) refresh(ctx context.Context, l *loop) error {
	groups, err := s.opts.NodeGroups.NodeGroups(ctx)
	if err != nil {
		return fmt.Errorf("listing node groups: %w", err)
	}
	l.groups = groups
	l.problems = slices.Clone(groups.Problems)
	s.applyMinimums(l)
	groups = l.groups
	s.atomic.claimInstances(groups.Groups, l.now, s.provisionTime)

	input, err := s.readCluster(ctx)
	if err != nil {
		return err
	}
	s.readBuffers(ctx, &input, l)
	s.readRequests(ctx, &input, l)
	// After the pods of buffers and requests, whose claims count too.
	if s.readDRA(ctx, &input) {
		input.Nodes = awaitDevices(ctx, groups.Groups, input.Nodes, input.ResourceSlices, l.now)
	}
	l.nodes = input.Nodes
	l.timedOut = s.state.Update(groups.Groups, input.Nodes, l.now)
	input.NodeGroups = s.withScaleDownBlocks(l, groups.Groups)
	l.snapshot = snapshot.New(input)
	return nil
}

// withScaleDownBlocks keeps groups that are still growing, for pending pods
// or for an atomic scale-up, or unhealthy out of scale-down: their nodes
// are not settled enough to judge.
func (s *steps) withScaleDownBlocks(l *loop, groups []nodegroups.NodeGroup) []nodegroups.NodeGroup {
	out := make([]nodegroups.NodeGroup, 0, len(groups))
	for _, group := range groups {
		state := s.state.Group(group.ID())
		_, scalingUp := l.reserved[group.ID()]
		switch healthy, message := s.state.GroupHealthy(group.ID()); {
		case scalingUp:
			group = scaleDownBlocked{NodeGroup: group, reason: "waiting for the nodes of an atomic scale-up"}
		case !state.Converged():
			group = scaleDownBlocked{NodeGroup: group, reason: fmt.Sprintf("waiting for %d requested node(s)", max(state.Upcoming, state.NotCreated))}
		case !healthy:
			group = scaleDownBlocked{NodeGroup: group, reason: "node group unhealthy: " + message}
		}
		out = append(out, group)
	}
	return out
}

// scaleDownBlocked is a group whose nodes the engine keeps for a reason of
// its own, on top of the group's own reasons.
type scaleDownBlocked struct {
	nodegroups.NodeGroup
	reason string
}

func (g scaleDownBlocked) ScaleDownBlockedReason() string {
	if own := g.NodeGroup.ScaleDownBlockedReason(); own != "" {
		return own
	}
	return g.reason
}

// readCluster lists what the snapshot needs. Objects come from the cache
// without copies; nothing here modifies them.
func (s *steps) readCluster(ctx context.Context) (snapshot.Input, error) {
	var (
		in         snapshot.Input
		nodes      corev1.NodeList
		daemonSets appsv1.DaemonSetList
		pdbs       policyv1.PodDisruptionBudgetList
		namespaces corev1.NamespaceList
	)
	for _, list := range []struct {
		what string
		list client.ObjectList
	}{
		{"nodes", &nodes}, {"DaemonSets", &daemonSets},
		{"PodDisruptionBudgets", &pdbs}, {"namespaces", &namespaces},
	} {
		if err := s.opts.Cluster.List(ctx, list.list, client.UnsafeDisableDeepCopy); err != nil {
			return in, fmt.Errorf("listing %s of the cluster: %w", list.what, err)
		}
	}
	if err := s.listPods(ctx, &in); err != nil {
		return in, fmt.Errorf("listing pods of the cluster: %w", err)
	}
	s.readStorage(ctx, &in)
	s.readControllers(ctx, &in)
	in.Nodes = pointers(nodes.Items)
	in.DaemonSets = pointers(daemonSets.Items)
	in.PodDisruptionBudgets = pointers(pdbs.Items)
	in.Namespaces = pointers(namespaces.Items)
	return in, nil
}

// readStorage lists the storage objects the volume predicates read into
// in, within OptionalReadTimeout. A failure does not stop the loop: pods
// without claims are simulated as usual, and those with claims are
// reported as not evaluated.
func (s *steps) readStorage(ctx context.Context, in *snapshot.Input) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.OptionalReadTimeout)
	defer cancel()
	var (
		claims   corev1.PersistentVolumeClaimList
		volumes  corev1.PersistentVolumeList
		classes  storagev1.StorageClassList
		csiNodes storagev1.CSINodeList
	)
	for _, list := range []struct {
		what string
		list client.ObjectList
	}{
		{"PersistentVolumeClaims", &claims}, {"PersistentVolumes", &volumes},
		{"StorageClasses", &classes}, {"CSINodes", &csiNodes},
	} {
		if err := s.opts.Cluster.List(ctx, list.list, client.UnsafeDisableDeepCopy); err != nil {
			in.StorageError = fmt.Errorf("listing %s of the cluster: %w", list.what, err)
			klog.FromContext(ctx).Error(err, "Cannot read the storage objects of the cluster; pods with volume claims will not be simulated", "kind", list.what)
			return
		}
	}
	in.PersistentVolumeClaims = pointers(claims.Items)
	in.PersistentVolumes = pointers(volumes.Items)
	in.StorageClasses = pointers(classes.Items)
	in.CSINodes = pointers(csiNodes.Items)
}

// readDRA lists the Dynamic Resource Allocation objects the claim check
// reads into in, within OptionalReadTimeout, when a pod of in has resource
// claims: clusters that do not use DRA (or do not serve its API) are not
// asked. A failure does not stop the loop: pods without resource claims
// are simulated as usual, and those with claims are reported as not
// evaluated. It tells whether it read them.
func (s *steps) readDRA(ctx context.Context, in *snapshot.Input) bool {
	if !slices.ContainsFunc(in.Pods, func(pod *corev1.Pod) bool { return len(pod.Spec.ResourceClaims) > 0 }) &&
		!slices.ContainsFunc(in.CachedPods, func(pod *snapshot.Pod) bool { return len(pod.Spec.ResourceClaims) > 0 }) {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.OptionalReadTimeout)
	defer cancel()
	var (
		resourceSlices resourcev1.ResourceSliceList
		classes        resourcev1.DeviceClassList
		claims         resourcev1.ResourceClaimList
		templates      resourcev1.ResourceClaimTemplateList
	)
	for _, list := range []struct {
		what string
		list client.ObjectList
	}{
		{"ResourceSlices", &resourceSlices}, {"DeviceClasses", &classes},
		{"ResourceClaims", &claims}, {"ResourceClaimTemplates", &templates},
	} {
		if err := s.opts.Cluster.List(ctx, list.list, client.UnsafeDisableDeepCopy); err != nil {
			in.DRAError = fmt.Errorf("listing %s of the cluster: %w", list.what, err)
			klog.FromContext(ctx).Error(err, "Cannot read the DRA objects of the cluster; pods with resource claims will not be simulated", "kind", list.what)
			return false
		}
	}
	in.ResourceSlices = pointers(resourceSlices.Items)
	in.DeviceClasses = pointers(classes.Items)
	in.ResourceClaims = pointers(claims.Items)
	in.ResourceClaimTemplates = pointers(templates.Items)
	return true
}

// readControllers lists into in the metadata of the controllers that
// scale-down counts on to recreate the pods it evicts
// (scaledown.ReplicatingControllers), within OptionalReadTimeout. A
// failure does not stop the loop: scale-down keeps the nodes of their pods.
func (s *steps) readControllers(ctx context.Context, in *snapshot.Input) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.OptionalReadTimeout)
	defer cancel()
	var controllers []*metav1.PartialObjectMetadata
	for _, kind := range scaledown.ReplicatingControllers {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(kind.GroupVersion().WithKind(kind.Kind + "List"))
		if err := s.opts.Cluster.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			in.ControllersError = fmt.Errorf("listing %ss of the cluster: %w", kind.Kind, err)
			klog.FromContext(ctx).Error(err, "Cannot read the controllers of the cluster; nodes running their pods will not be scaled down", "kind", kind.Kind)
			return
		}
		controllers = append(controllers, pointers(list.Items)...)
	}
	in.Controllers = controllers
}

// listPods lists the pods into in: from a PodLister as its cache keeps
// them, else through List.
func (s *steps) listPods(ctx context.Context, in *snapshot.Input) error {
	if lister, ok := s.opts.Cluster.(PodLister); ok {
		pods, err := lister.ListPods(ctx)
		in.CachedPods = pods
		return err
	}
	var pods corev1.PodList
	if err := s.opts.Cluster.List(ctx, &pods, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	in.Pods = pointers(pods.Items)
	return nil
}

func pointers[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}
