package scaledown_test

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/trim"
)

// testGroup is an in-memory node group with per-group options and a
// scale-down block, which snapshottest.NodeGroup does not have.
type testGroup struct {
	*st.NodeGroup
	options nodegroups.GroupOptions
	blocked string
}

var _ nodegroups.NodeGroup = &testGroup{}

func (g *testGroup) Options() nodegroups.GroupOptions { return g.options }
func (g *testGroup) ScaleDownBlockedReason() string   { return g.blocked }

// newGroup returns a group with the given members, min 0 and max 100.
func newGroup(name string, nodes ...*corev1.Node) *testGroup {
	group := &testGroup{NodeGroup: &st.NodeGroup{Name: name, Max: 100}}
	for _, node := range nodes {
		group.Nodes = append(group.Nodes, node.Name)
		group.Target++
	}
	return group
}

// cluster is the input of a planning test: every node not named in
// outside belongs to the group "ng", and the controllers the pods name
// exist, but those named in gone.
type cluster struct {
	nodes []*corev1.Node
	pods  []*corev1.Pod
	// cached passes the pods through the controller's cache, which keeps
	// them as trim makes them.
	cached  bool
	pdbs    []*policyv1.PodDisruptionBudget
	claims  []*corev1.PersistentVolumeClaim
	volumes []*corev1.PersistentVolume
	// resourceSlices publish the nodes' DRA devices.
	resourceSlices []*resourceapi.ResourceSlice
	outside        []string
	// gone are the names of the pods' controllers that no longer exist;
	// controllersError, when set, is why none could be read.
	gone             []string
	controllersError error
}

func (c cluster) snapshot(configure func(*testGroup)) *snapshot.Snapshot {
	var members []*corev1.Node
	for _, node := range c.nodes {
		if !contains(c.outside, node.Name) {
			members = append(members, node)
		}
	}
	group := newGroup("ng", members...)
	if configure != nil {
		configure(group)
	}
	in := snapshot.Input{
		Nodes: c.nodes, PodDisruptionBudgets: c.pdbs,
		PersistentVolumeClaims: c.claims, PersistentVolumes: c.volumes,
		ResourceSlices: c.resourceSlices,
		Controllers: slices.DeleteFunc(st.Controllers(c.pods...), func(controller *metav1.PartialObjectMetadata) bool {
			return contains(c.gone, controller.Name)
		}),
		ControllersError: c.controllersError,
		NodeGroups:       []nodegroups.NodeGroup{group},
	}
	if c.cached {
		transformer := trim.NewTransformer()
		for _, pod := range c.pods {
			in.CachedPods = append(in.CachedPods, transformer.Pod(pod))
		}
	} else {
		in.Pods = c.pods
	}
	return snapshot.New(in)
}

func contains(names []string, name string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

// node returns a ready 4-core 16Gi node created long before st.Now.
func node(name string, opts ...st.NodeOption) *corev1.Node {
	longAgo := createdAt(st.Now.Add(-24 * time.Hour))
	return st.Node(name, "4", "16Gi", append([]st.NodeOption{longAgo}, opts...)...)
}

func withAnnotation(key, value string) st.NodeOption {
	return func(n *corev1.Node) {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[key] = value
	}
}

func notReady(n *corev1.Node) {
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
}

func createdAt(t time.Time) st.NodeOption {
	return func(n *corev1.Node) { n.CreationTimestamp = metav1.NewTime(t) }
}

// pod returns a running pod of the ReplicaSet "app" on the node.
func pod(name, cpu, nodeName string, opts ...st.PodOption) *corev1.Pod {
	return st.Pod(name, cpu, "", append([]st.PodOption{st.OwnedBy("app"), st.OnNode(nodeName), st.WithPodLabels("app", "web")}, opts...)...)
}

func inKubeSystem(p *corev1.Pod) { p.Namespace = metav1.NamespaceSystem }

func withoutController(p *corev1.Pod) { p.OwnerReferences = nil }

// controlledBy makes the pod's controller an object "app" of the kind.
func controlledBy(apiVersion, kind string) st.PodOption {
	return func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "app", UID: types.UID("uid-app"), Controller: ptr.To(true)}}
	}
}

func withPodAnnotation(key, value string) st.PodOption {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[key] = value
	}
}

func withVolume(volume corev1.Volume) st.PodOption {
	return func(p *corev1.Pod) { p.Spec.Volumes = append(p.Spec.Volumes, volume) }
}

func emptyDir(name string, medium corev1.StorageMedium) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: medium}}}
}

// logsHostPath returns a hostPath volume called logs.
func logsHostPath() corev1.Volume {
	return corev1.Volume{Name: "logs", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/logs"}}}
}

func daemonSetPod(p *corev1.Pod) {
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: types.UID("uid-ds"), Controller: ptr.To(true)}}
}

func mirrorPod(p *corev1.Pod) {
	p.OwnerReferences = nil
	p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "hash"}
}

// pdb returns a budget over the pods labelled app=web of namespace with
// the given disruptions allowed.
func pdb(namespace string, allowed int32) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: namespace},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed},
	}
}

// options are the upstream defaults but with no waiting: unneeded nodes
// are removable at once.
func options(change ...func(*scaledown.Options)) scaledown.Options {
	opts := scaledown.Options{
		Groups:                            nodegroups.Settings{ScaleDownUtilizationThreshold: 0.5},
		DelayAfterAdd:                     10 * time.Minute,
		DelayAfterFailure:                 3 * time.Minute,
		PriorityCutoff:                    -10,
		SkipNodesWithLocalStorage:         true,
		SkipNodesWithSystemPods:           true,
		SkipNodesWithCustomControllerPods: true,
		MaxEmptyBulkDelete:                10,
		MaxParallelDrains:                 1,
	}
	for _, c := range change {
		c(&opts)
	}
	return opts
}

func names(removals []scaledown.Removal) []string {
	out := []string{}
	for _, r := range removals {
		out = append(out, r.Node.Name)
	}
	return out
}

func reasons(kept map[string]scaledown.Decision) map[string]scaledown.Reason {
	out := map[string]scaledown.Reason{}
	for name, decision := range kept {
		out[name] = decision.Reason
	}
	return out
}
