// Package nodefacts is the one place that reads a node for the engine:
// whether it takes pods, whether it has started, which of its taints say
// what the nodes of its group are made of and which only say what is
// happening to this node now, and how a real node becomes the template of
// its group. Cluster state, scale-up, scale-down and the providers all ask
// here: two answers to one of these questions make a wrong scale-up or
// remove a node that should stay.
package nodefacts

import (
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// The autoscaler's own taints, the upstream cluster-autoscaler's names, so
// that either autoscaler recognises the other's.
const (
	// ToBeDeletedTaint (NoSchedule) marks a node the autoscaler is removing;
	// its value is the unix time the removal started.
	ToBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"
	// DeletionCandidateTaint (PreferNoSchedule) marks an unneeded node.
	DeletionCandidateTaint = "DeletionCandidateOfClusterAutoscaler"
)

// IsAutoscalerTaint says whether the taint key is one the autoscaler puts
// on nodes.
func IsAutoscalerTaint(key string) bool {
	return key == ToBeDeletedTaint || key == DeletionCandidateTaint
}

// Taint key prefixes that the upstream cluster-autoscaler gives a meaning,
// honoured so that existing clusters behave the same.
const (
	// StartupTaintPrefix marks a taint that the node's own setup removes: the
	// node has not started while it carries one, and templates leave it out.
	StartupTaintPrefix = "startup-taint.cluster-autoscaler.kubernetes.io/"
	// IgnoreTaintPrefix is the older name of StartupTaintPrefix.
	IgnoreTaintPrefix = "ignore-taint.cluster-autoscaler.kubernetes.io/"
	// StatusTaintPrefix marks a taint that reports a node's status: templates
	// leave it out, but the node is ready with it.
	StatusTaintPrefix = "status-taint.cluster-autoscaler.kubernetes.io/"
)

// Taints of the cloud provider's controllers on a node: condition taints,
// which a new node of the group would not have.
const (
	// CloudProviderUninitializedTaint is on a node whose external cloud
	// provider has not initialized it yet.
	CloudProviderUninitializedTaint = "node.cloudprovider.kubernetes.io/uninitialized"
	// CloudProviderShutdownTaint is on a node whose instance is shut down.
	CloudProviderShutdownTaint = "node.cloudprovider.kubernetes.io/shutdown"
)

// ClusterAPIUninitializedTaint is the taint Cluster API puts on a new
// Node until it has copied the Machine's labels to it: a startup taint.
const ClusterAPIUninitializedTaint = "node.cluster.x-k8s.io/uninitialized"

// MaxStartupTime is how long after its creation a node that is not ready
// counts as starting (on its way) rather than unready, as upstream.
const MaxStartupTime = 15 * time.Minute

// GPUResources are the extended resources that make a node a GPU node, in
// the order they are looked for: scale-down judges a GPU node on its GPUs,
// and the default price counts them.
var GPUResources = []corev1.ResourceName{"nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915"}

// GPUResource returns the first of GPUResources of which amount gives
// more than zero, or "".
func GPUResource(amount func(corev1.ResourceName) int64) corev1.ResourceName {
	i := slices.IndexFunc(GPUResources, func(name corev1.ResourceName) bool { return amount(name) > 0 })
	if i < 0 {
		return ""
	}
	return GPUResources[i]
}

// conditionTaints are put on a node by Kubernetes for the node's current
// condition; a new node of the group would not have them.
var conditionTaints = sets.New(
	corev1.TaintNodeNotReady,
	corev1.TaintNodeUnreachable,
	corev1.TaintNodeUnschedulable,
	corev1.TaintNodeMemoryPressure,
	corev1.TaintNodeDiskPressure,
	corev1.TaintNodePIDPressure,
	corev1.TaintNodeNetworkUnavailable,
	corev1.TaintNodeOutOfService,
	CloudProviderUninitializedTaint,
	CloudProviderShutdownTaint,
)

// Rules holds the taint keys a cluster declares as startup and status
// taints, on top of the prefixes above. The zero value knows the prefixes
// and ClusterAPIUninitializedTaint only.
type Rules struct {
	startupTaints sets.Set[string]
	statusTaints  sets.Set[string]
}

// NewRules returns the rules of a cluster whose nodes start with the
// startupTaints and report their status with the statusTaints (keys, as
// upstream's --startup-taint and --status-taint).
func NewRules(startupTaints, statusTaints []string) Rules {
	return Rules{startupTaints: sets.New(startupTaints...), statusTaints: sets.New(statusTaints...)}
}

// IsStartupTaint says whether a node carrying the taint key has not
// finished starting.
func (r Rules) IsStartupTaint(key string) bool {
	return r.startupTaints.Has(key) || key == ClusterAPIUninitializedTaint ||
		strings.HasPrefix(key, StartupTaintPrefix) || strings.HasPrefix(key, IgnoreTaintPrefix)
}

// IsStatusTaint says whether the taint key reports a node's status, which
// a new node would not have, without making the node unready.
func (r Rules) IsStatusTaint(key string) bool {
	return r.statusTaints.Has(key) || strings.HasPrefix(key, StatusTaintPrefix)
}

// IsTemplateTaint says whether a new node of the group of a node that
// carries the taint would carry it too: it is none of the autoscaler's,
// condition, startup and status taints.
func (r Rules) IsTemplateTaint(key string) bool {
	return !IsAutoscalerTaint(key) && !conditionTaints.Has(key) &&
		!r.IsStartupTaint(key) && !r.IsStatusTaint(key)
}

// KubeletReady says whether Kubernetes lets the node take pods: its Ready
// condition is True and the not-ready and unreachable taints are gone.
// The node lifecycle controller lifts the not-ready taint a few seconds
// after the condition turned True; until then the scheduler keeps pods off.
func KubeletReady(node *corev1.Node) bool {
	for _, taint := range node.Spec.Taints {
		if taint.Key == corev1.TaintNodeNotReady || taint.Key == corev1.TaintNodeUnreachable {
			return false
		}
	}
	for _, condition := range node.Status.Conditions {
		if condition.Type == corev1.NodeReady {
			return condition.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Ready says whether the node takes pods and has started: it is
// KubeletReady and carries no startup taint.
func (r Rules) Ready(node *corev1.Node) bool {
	if !KubeletReady(node) {
		return false
	}
	for _, taint := range node.Spec.Taints {
		if r.IsStartupTaint(taint.Key) {
			return false
		}
	}
	return true
}

// Readiness is what a registered node is for the autoscaler.
type Readiness string

const (
	// Ready nodes take pods.
	Ready Readiness = "Ready"
	// NotStarted nodes have not been Ready yet and were created less than
	// MaxStartupTime ago: they are still on their way.
	NotStarted Readiness = "NotStarted"
	// Unready nodes are neither: they stopped being Ready (a dead kubelet,
	// a lost network), or never became Ready in MaxStartupTime.
	Unready Readiness = "Unready"
)

// MaxStatusDelayAfterCreation is how soon after registering a kubelet
// reports the node's first Ready condition, as upstream: a condition that
// last changed later than that changed after the node had started.
const MaxStatusDelayAfterCreation = 2 * time.Minute

// Readiness tells whether node is Ready, NotStarted or Unready at now.
func (r Rules) Readiness(node *corev1.Node, now time.Time) Readiness {
	switch {
	case r.Ready(node):
		return Ready
	case now.Sub(node.CreationTimestamp.Time) < MaxStartupTime && !wentDown(node):
		return NotStarted
	default:
		return Unready
	}
}

// wentDown says whether the kubelet stopped reporting the node Ready after
// it had started: a young node that dies is unready at once, not on its way
// for the rest of MaxStartupTime. A node still held by a startup taint has
// a Ready kubelet and has not gone down.
func wentDown(node *corev1.Node) bool {
	if KubeletReady(node) {
		return false
	}
	for _, condition := range node.Status.Conditions {
		if condition.Type == corev1.NodeReady {
			return condition.LastTransitionTime.Sub(node.CreationTimestamp.Time) >= MaxStatusDelayAfterCreation
		}
	}
	return false
}

// Started returns node as it will be once it has started: without the
// condition and startup taints that keep pods off it while it starts.
func (r Rules) Started(node *corev1.Node) *corev1.Node {
	started := node.DeepCopy()
	started.Spec.Taints = slices.DeleteFunc(started.Spec.Taints, func(taint corev1.Taint) bool {
		return conditionTaints.Has(taint.Key) || r.IsStartupTaint(taint.Key)
	})
	return started
}

// AwaitingDevicesReason is the reason of the Ready condition of a node
// held as not started by AwaitingDevices.
const AwaitingDevicesReason = "AwaitingDRADevices"

// AwaitingDevices returns node, Ready for its kubelet, as the engine holds
// it while DRA drivers have not published its devices yet (they publish a
// node's ResourceSlices once it runs, a while after its kubelet is Ready):
// not Ready since its creation, so that a young node is NotStarted, on its
// way, as upstream holds such a node, and no template is made from it.
// missing names the drivers in the condition's message.
func AwaitingDevices(node *corev1.Node, missing []string) *corev1.Node {
	awaiting := node.DeepCopy()
	awaiting.Status.Conditions = slices.DeleteFunc(awaiting.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == corev1.NodeReady })
	awaiting.Status.Conditions = append(awaiting.Status.Conditions, corev1.NodeCondition{
		Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: AwaitingDevicesReason,
		Message:            awaitingMessage(missing),
		LastTransitionTime: node.CreationTimestamp,
	})
	return awaiting
}

func awaitingMessage(missing []string) string {
	if len(missing) == 1 {
		return "its DRA driver " + missing[0] + " has not published its devices yet"
	}
	return "its DRA drivers " + strings.Join(missing, ", ") + " have not published its devices yet"
}

// AwaitedDevices says which drivers a node held by AwaitingDevices waits
// for, in words, and whether it is such a node.
func AwaitedDevices(node *corev1.Node) (string, bool) {
	for _, condition := range node.Status.Conditions {
		if condition.Type == corev1.NodeReady && condition.Reason == AwaitingDevicesReason {
			return condition.Message, true
		}
	}
	return "", false
}

// UsableAsTemplate says whether node shows what a new node of its group
// would be: Kubernetes reports it Ready, it is not cordoned and nothing is
// removing it. A startup taint does not disqualify it: the template leaves
// it out.
func UsableAsTemplate(node *corev1.Node) bool {
	return KubeletReady(node) && !node.Spec.Unschedulable && node.DeletionTimestamp == nil &&
		!HasTaint(node, ToBeDeletedTaint)
}

// HasTaint says whether node carries a taint with the key.
func HasTaint(node *corev1.Node, key string) bool {
	for _, taint := range node.Spec.Taints {
		if taint.Key == key {
			return true
		}
	}
	return false
}

// TemplateNode returns the node a new member of the group groupID would
// become, copied from node (a real member, or what the group publishes to
// scale from zero): named after the group, with that name as its hostname
// label, without what belongs to the life of that one node (identity,
// provider ID, cordon) and with its template taints only.
func (r Rules) TemplateNode(node *corev1.Node, groupID string) *corev1.Node {
	name := templateName(groupID)
	template := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: maps.Clone(node.Labels), Annotations: maps.Clone(node.Annotations)},
		Spec:       *node.Spec.DeepCopy(),
		Status:     *node.Status.DeepCopy(),
	}
	if template.Labels == nil {
		template.Labels = map[string]string{}
	}
	template.Labels[corev1.LabelHostname] = name
	template.Spec.ProviderID = ""
	template.Spec.Unschedulable = false
	template.Spec.Taints = nil
	for _, taint := range node.Spec.Taints {
		if r.IsTemplateTaint(taint.Key) {
			template.Spec.Taints = append(template.Spec.Taints, taint)
		}
	}
	return template
}

// templateName is unique per group and never the name of a real node.
func templateName(groupID string) string {
	return "template-" + strings.NewReplacer("/", "-", ".", "-").Replace(strings.ToLower(groupID))
}
