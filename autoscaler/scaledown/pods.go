package scaledown

import (
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// Annotations users set to steer scale-down, the upstream ones.
const (
	// SafeToEvictAnnotation "false" makes a pod block its node's removal;
	// "true" lifts the no-controller, kube-system and local storage rules.
	SafeToEvictAnnotation = "cluster-autoscaler.kubernetes.io/safe-to-evict"
	// SafeToEvictLocalVolumesAnnotation lists, comma-separated, the local
	// volumes of a pod that may be lost.
	SafeToEvictLocalVolumesAnnotation = "cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"
	// ScaleDownDisabledAnnotation "true" on a node keeps it.
	ScaleDownDisabledAnnotation = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
)

// podRole is how a pod is treated when its node goes.
type podRole int

const (
	// podStays: DaemonSet and mirror pods belong to the node; they are
	// neither moved nor evicted. Pods already terminating are neither.
	podStays podRole = iota
	// podExpendable: below the priority cutoff; evicted, needs no place.
	podExpendable
	// podMovable: must pass the blocking rules and fit elsewhere.
	podMovable
)

func roleOf(pod *snapshot.Pod, priorityCutoff int32) podRole {
	switch {
	case pod.IsDaemonSetPod() || isMirrorPod(pod) || pod.DeletionTimestamp != nil:
		return podStays
	case pod.Spec.Priority != nil && *pod.Spec.Priority < priorityCutoff:
		return podExpendable
	default:
		return podMovable
	}
}

// terminationMargin is how long past the end of its grace period a pod may
// take to go, as upstream's PodLongTerminatingExtraThreshold.
const terminationMargin = 30 * time.Second

// gone tells whether the pod holds its node no more at now: it finished, or
// it is still terminating terminationMargin after the end of its grace
// period, which the API server records as its deletionTimestamp. Only a
// dead kubelet (whose pods taint-based eviction deletes) or a finalizer
// nobody removes keeps a pod that long; waiting for it would keep its node
// forever. Planner and Actuator ask this alone, so that they agree.
func gone(pod *snapshot.Pod, now time.Time) bool {
	return pod.Finished() || pod.DeletionTimestamp != nil && now.After(pod.DeletionTimestamp.Add(terminationMargin))
}

func isMirrorPod(pod *snapshot.Pod) bool {
	_, ok := pod.Annotations[corev1.MirrorPodAnnotationKey]
	return ok
}

// blockingReason applies the rules that do not depend on other pods, as
// opts turn them on: it returns why the pod must not be evicted, or ""
// when it may be. snap tells which controllers exist.
func blockingReason(pod *snapshot.Pod, snap *snapshot.Snapshot, pdbs *pdbTracker, opts Options) (BlockingReason, string) {
	switch pod.Annotations[SafeToEvictAnnotation] {
	case "false":
		return BlockingNotSafeToEvictAnnotation, fmt.Sprintf("pod is annotated %s=false", SafeToEvictAnnotation)
	case "true":
		return "", ""
	}
	if message := notReplicated(pod, snap, opts.SkipNodesWithCustomControllerPods); message != "" {
		return BlockingNotReplicated, message
	}
	if opts.SkipNodesWithSystemPods && pod.Namespace == metav1.NamespaceSystem && !pdbs.covers(pod) {
		return BlockingUnmovableKubeSystemPod, "kube-system pod has no PodDisruptionBudget"
	}
	if volumes := unsafeLocalVolumes(pod); opts.SkipNodesWithLocalStorage && len(volumes) > 0 {
		return BlockingLocalStorageRequested, fmt.Sprintf("pod has local volumes %s not listed in %s", strings.Join(volumes, ", "), SafeToEvictLocalVolumesAnnotation)
	}
	return "", ""
}

// notReplicated says why no controller would recreate the pod once it is
// evicted, or "" when one would. A built-in controller does while it
// exists; a controller of another kind is trusted to, as upstream does,
// unless skipCustom.
func notReplicated(pod *snapshot.Pod, snap *snapshot.Snapshot, skipCustom bool) string {
	controller := pod.Controller()
	switch {
	case controller == nil:
		return "pod has no controller to recreate it"
	case !builtIn(controller):
		if skipCustom {
			return fmt.Sprintf("pod is controlled by %s %s, not a built-in workload controller", controller.Kind, controller.Name)
		}
		return ""
	}
	switch exists, err := snap.ControllerExists(controller.UID); {
	case err != nil:
		return fmt.Sprintf("cannot tell whether the pod's %s %s still exists: %v", controller.Kind, controller.Name, err)
	case !exists:
		return fmt.Sprintf("the pod's %s %s no longer exists to recreate it", controller.Kind, controller.Name)
	}
	return ""
}

// ReplicatingControllers are the built-in controllers known to recreate
// the pods they lose, as upstream counts them, as long as they exist: the
// engine reads their metadata (snapshot.Input.Controllers). DaemonSet pods
// never move at all.
var ReplicatingControllers = []schema.GroupVersionKind{
	corev1.SchemeGroupVersion.WithKind("ReplicationController"),
	appsv1.SchemeGroupVersion.WithKind("ReplicaSet"),
	appsv1.SchemeGroupVersion.WithKind("StatefulSet"),
	batchv1.SchemeGroupVersion.WithKind("Job"),
}

// builtIn tells whether the owner is of a kind of ReplicatingControllers.
func builtIn(owner *metav1.OwnerReference) bool {
	kind := schema.FromAPIVersionAndKind(owner.APIVersion, owner.Kind).GroupKind()
	return slices.ContainsFunc(ReplicatingControllers, func(gvk schema.GroupVersionKind) bool { return gvk.GroupKind() == kind })
}

// unsafeLocalVolumes are the pod's emptyDir (not in memory) and hostPath
// volumes that the pod does not declare safe to lose.
func unsafeLocalVolumes(pod *snapshot.Pod) []string {
	var allowed sets.Set[string]
	if list := pod.Annotations[SafeToEvictLocalVolumesAnnotation]; list != "" {
		allowed = sets.New(strings.Split(list, ",")...)
	}
	var unsafe []string
	for i := range pod.Spec.Volumes {
		volume := &pod.Spec.Volumes[i]
		local := volume.HostPath != nil || (volume.EmptyDir != nil && volume.EmptyDir.Medium != corev1.StorageMediumMemory)
		if local && !allowed.Has(volume.Name) {
			unsafe = append(unsafe, volume.Name)
		}
	}
	return unsafe
}

// pdbTracker counts the disruptions each PodDisruptionBudget still allows
// as nodes are chosen for removal in one pass.
type pdbTracker struct {
	budgets []*budget
}

type budget struct {
	pdb       *policyv1.PodDisruptionBudget
	selector  labels.Selector
	remaining int32
}

func newPDBTracker(logger klog.Logger, pdbs []*policyv1.PodDisruptionBudget) *pdbTracker {
	t := &pdbTracker{}
	for _, pdb := range pdbs {
		// A nil selector matches no pod in policy/v1; an empty one every pod.
		selector, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil {
			logger.V(2).Info("Ignoring PodDisruptionBudget with an invalid selector", "pdb", klog.KObj(pdb), "err", err)
			continue
		}
		t.budgets = append(t.budgets, &budget{pdb: pdb, selector: selector, remaining: pdb.Status.DisruptionsAllowed})
	}
	return t
}

func (t *pdbTracker) covers(pod *snapshot.Pod) bool {
	for _, b := range t.budgets {
		if b.matches(pod.Namespace, pod.Labels) {
			return true
		}
	}
	return false
}

func (b *budget) matches(namespace string, podLabels map[string]string) bool {
	return b.pdb.Namespace == namespace && b.selector.Matches(labels.Set(podLabels))
}

// check tells whether evicting all of pods together stays within every
// budget; when not, it returns the first pod over budget and why.
func (t *pdbTracker) check(pods []*corev1.Pod) (*corev1.Pod, string) {
	for _, b := range t.budgets {
		var disrupted int32
		for _, pod := range pods {
			if !b.matches(pod.Namespace, pod.Labels) {
				continue
			}
			disrupted++
			if disrupted > b.remaining {
				return pod, fmt.Sprintf("PodDisruptionBudget %s/%s allows %d more disruptions", b.pdb.Namespace, b.pdb.Name, b.remaining)
			}
		}
	}
	return nil, ""
}

// consume takes the disruptions of pods from the budgets.
func (t *pdbTracker) consume(pods []*corev1.Pod) {
	for _, b := range t.budgets {
		for _, pod := range pods {
			if b.matches(pod.Namespace, pod.Labels) {
				b.remaining--
			}
		}
	}
}

// MoveBlocker says why a running pod must not be evicted so that it runs
// on another node, or "" when it may be: its controller must recreate it,
// and nothing the pod or a PodDisruptionBudget says may forbid it. It is
// narrower than the rules of scale-down, which the upstream options turn
// off: a pod of no built-in controller (ReplicatingControllers), a pod that
// belongs to its node, one that is terminating, one with local volumes not
// declared safe to lose, and one covered by a PodDisruptionBudget that
// allows no disruption now all stay. The Eviction API checks the budgets
// again.
func MoveBlocker(pod *snapshot.Pod, snap *snapshot.Snapshot) string {
	switch {
	case pod.IsDaemonSetPod() || isMirrorPod(pod):
		return "the pod belongs to its node"
	case pod.DeletionTimestamp != nil:
		return "the pod is terminating"
	case pod.Annotations[SafeToEvictAnnotation] == "false":
		return fmt.Sprintf("the pod is annotated %s=false", SafeToEvictAnnotation)
	case pod.Annotations[DoNotDisruptAnnotation] == "true":
		return fmt.Sprintf("the pod is annotated %s=true", DoNotDisruptAnnotation)
	}
	if message := notReplicated(pod, snap, true); message != "" {
		return message
	}
	if volumes := unsafeLocalVolumes(pod); len(volumes) > 0 && pod.Annotations[SafeToEvictAnnotation] != "true" {
		return fmt.Sprintf("the pod has local volumes %s not listed in %s", strings.Join(volumes, ", "), SafeToEvictLocalVolumesAnnotation)
	}
	for _, pdb := range snap.PodDisruptionBudgets() {
		selector, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || pdb.Namespace != pod.Namespace || !selector.Matches(labels.Set(pod.Labels)) {
			continue
		}
		if pdb.Status.DisruptionsAllowed < 1 {
			return fmt.Sprintf("PodDisruptionBudget %s/%s allows no disruption", pdb.Namespace, pdb.Name)
		}
	}
	return ""
}
