package simulator_test

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

const attachDriver = "attach.csi.example.com"

func TestVolumePredicates(t *testing.T) {
	zoneA, zoneB := st.WithNodeLabels(zoneKey, "a"), st.WithNodeLabels(zoneKey, "b")
	waitForConsumer, immediate := storagev1.VolumeBindingWaitForFirstConsumer, storagev1.VolumeBindingImmediate
	twoZones := []*corev1.Node{st.Node("a1", "4", "8Gi", zoneA), st.Node("b1", "4", "8Gi", zoneB)}
	tests := []struct {
		name  string
		nodes []*corev1.Node
		// pods are already bound to nodes.
		pods    []*corev1.Pod
		storage snapshot.Input
		pod     *corev1.Pod
		// want maps nodes to the reasons the pod does not fit them.
		want map[string][]string
	}{
		{
			name:  "a bound volume's node affinity keeps the pod in the volume's zone",
			nodes: twoZones,
			storage: snapshot.Input{
				PersistentVolumeClaims: []*corev1.PersistentVolumeClaim{st.BoundClaim("data", "pv-b")},
				PersistentVolumes:      []*corev1.PersistentVolume{st.PersistentVolume("pv-b", st.BoundTo("data"), st.RequiringNode(zoneKey, "b"))},
			},
			pod:  st.Pod("p", "1", "1Gi", st.WithClaims("data")),
			want: map[string][]string{"a1": {simulator.ReasonVolumeNodeAffinity}, "b1": nil},
		},
		{
			name:  "a bound volume's zone label keeps the pod in its zone, nodes without zones take it",
			nodes: append(twoZones, st.Node("nozone", "4", "8Gi")),
			storage: snapshot.Input{
				PersistentVolumeClaims: []*corev1.PersistentVolumeClaim{st.BoundClaim("data", "pv-b")},
				PersistentVolumes:      []*corev1.PersistentVolume{st.PersistentVolume("pv-b", st.BoundTo("data"), st.WithVolumeLabels(corev1.LabelFailureDomainBetaZone, "b__c"))},
			},
			pod:  st.Pod("p", "1", "1Gi", st.WithClaims("data")),
			want: map[string][]string{"a1": {simulator.ReasonVolumeZone}, "b1": nil, "nozone": nil},
		},
		{
			name:  "a claim that does not exist fits no node",
			nodes: twoZones,
			pod:   st.Pod("p", "1", "1Gi", st.WithClaims("missing")),
			want:  map[string][]string{"a1": {`persistentvolumeclaim "missing" not found`}, "b1": {`persistentvolumeclaim "missing" not found`}},
		},
		{
			name:  "an unbound claim of an Immediate class waits for the PV controller",
			nodes: twoZones,
			storage: snapshot.Input{
				PersistentVolumeClaims: []*corev1.PersistentVolumeClaim{st.UnboundClaim("data", "fast")},
				StorageClasses:         []*storagev1.StorageClass{st.StorageClass("fast", attachDriver, immediate)},
			},
			pod:  st.Pod("p", "1", "1Gi", st.WithClaims("data")),
			want: map[string][]string{"a1": {simulator.ReasonUnboundImmediateClaims}, "b1": {simulator.ReasonUnboundImmediateClaims}},
		},
		{
			name:  "a claim naming its volume before the PV controller completed the binding is not bound yet",
			nodes: twoZones,
			storage: snapshot.Input{
				PersistentVolumeClaims: []*corev1.PersistentVolumeClaim{func() *corev1.PersistentVolumeClaim {
					claim := st.BoundClaim("data", "pv-b")
					claim.Annotations = nil
					return claim
				}()},
				PersistentVolumes: []*corev1.PersistentVolume{st.PersistentVolume("pv-b", st.BoundTo("data"))},
			},
			pod:  st.Pod("p", "1", "1Gi", st.WithClaims("data")),
			want: map[string][]string{"a1": {simulator.ReasonUnboundImmediateClaims}, "b1": {simulator.ReasonUnboundImmediateClaims}},
		},
		{
			name:  "a WaitForFirstConsumer claim is provisioned in the class's allowed topologies",
			nodes: twoZones,
			storage: snapshot.Input{
				PersistentVolumeClaims: []*corev1.PersistentVolumeClaim{st.UnboundClaim("data", "zonal")},
				StorageClasses:         []*storagev1.StorageClass{st.StorageClass("zonal", attachDriver, waitForConsumer, "a")},
			},
			pod:  st.Pod("p", "1", "1Gi", st.WithClaims("data")),
			want: map[string][]string{"a1": nil, "b1": {simulator.ReasonVolumeBindConflict}},
		},
		{
			name:  "a claim of a class without provisioner binds to an available local volume only",
			nodes: twoZones,
			storage: snapshot.Input{
				PersistentVolumeClaims: []*corev1.PersistentVolumeClaim{st.UnboundClaim("data", "local")},
				PersistentVolumes:      []*corev1.PersistentVolume{st.PersistentVolume("local-b1", st.OfClass("local"), st.RequiringNode(corev1.LabelHostname, "b1"))},
				StorageClasses:         []*storagev1.StorageClass{st.StorageClass("local", "kubernetes.io/no-provisioner", waitForConsumer)},
			},
			pod:  st.Pod("p", "1", "1Gi", st.WithClaims("data")),
			want: map[string][]string{"a1": {simulator.ReasonVolumeBindConflict}, "b1": nil},
		},
		{
			name:  "a claim being provisioned for a node fits that node only",
			nodes: twoZones,
			storage: snapshot.Input{
				PersistentVolumeClaims: []*corev1.PersistentVolumeClaim{func() *corev1.PersistentVolumeClaim {
					claim := st.UnboundClaim("data", "zonal")
					claim.Annotations = map[string]string{"volume.kubernetes.io/selected-node": "b1"}
					return claim
				}()},
				StorageClasses: []*storagev1.StorageClass{st.StorageClass("zonal", attachDriver, waitForConsumer)},
			},
			pod:  st.Pod("p", "1", "1Gi", st.WithClaims("data")),
			want: map[string][]string{"a1": {simulator.ReasonVolumeBindConflict}, "b1": nil},
		},
		{
			name:  "CSI attach limits count the volumes of the node's pods, a volume they share once",
			nodes: []*corev1.Node{st.Node("n", "4", "8Gi"), st.Node("unlimited", "4", "8Gi")},
			pods: []*corev1.Pod{
				st.Pod("running", "1", "1Gi", st.OnNode("n"), st.WithClaims("used")),
				st.Pod("running-too", "1", "1Gi", st.OnNode("unlimited"), st.WithClaims("used")),
			},
			storage: snapshot.Input{
				PersistentVolumeClaims: []*corev1.PersistentVolumeClaim{st.BoundClaim("used", "pv-used"), st.BoundClaim("data", "pv-data")},
				PersistentVolumes: []*corev1.PersistentVolume{
					st.PersistentVolume("pv-used", st.BoundTo("used"), st.CSIVolume(attachDriver)),
					st.PersistentVolume("pv-data", st.BoundTo("data"), st.CSIVolume(attachDriver)),
				},
				CSINodes: []*storagev1.CSINode{st.CSINode("n", attachDriver, 1)},
			},
			pod:  st.Pod("p", "1", "1Gi", st.WithClaims("data")),
			want: map[string][]string{"n": {simulator.ReasonMaxVolumeCount}, "unlimited": nil},
		},
		{
			name:  "a volume already attached to the node does not count again",
			nodes: []*corev1.Node{st.Node("n", "4", "8Gi")},
			pods:  []*corev1.Pod{st.Pod("running", "1", "1Gi", st.OnNode("n"), st.WithClaims("shared"))},
			storage: snapshot.Input{
				PersistentVolumeClaims: []*corev1.PersistentVolumeClaim{st.BoundClaim("shared", "pv-shared")},
				PersistentVolumes:      []*corev1.PersistentVolume{st.PersistentVolume("pv-shared", st.BoundTo("shared"), st.CSIVolume(attachDriver))},
				CSINodes:               []*storagev1.CSINode{st.CSINode("n", attachDriver, 1)},
			},
			pod:  st.Pod("p", "1", "1Gi", st.WithClaims("shared")),
			want: map[string][]string{"n": nil},
		},
		{
			name:  "a node over its limit still takes a pod whose volume it has, as kube-scheduler lets it",
			nodes: []*corev1.Node{st.Node("n", "4", "8Gi")},
			pods: []*corev1.Pod{
				st.Pod("running", "1", "1Gi", st.OnNode("n"), st.WithClaims("shared")),
				st.Pod("running-too", "1", "1Gi", st.OnNode("n"), st.WithClaims("other")),
			},
			storage: snapshot.Input{
				PersistentVolumeClaims: []*corev1.PersistentVolumeClaim{st.BoundClaim("shared", "pv-shared"), st.BoundClaim("other", "pv-other")},
				PersistentVolumes: []*corev1.PersistentVolume{
					st.PersistentVolume("pv-shared", st.BoundTo("shared"), st.CSIVolume(attachDriver)),
					st.PersistentVolume("pv-other", st.BoundTo("other"), st.CSIVolume(attachDriver)),
				},
				CSINodes: []*storagev1.CSINode{st.CSINode("n", attachDriver, 1)},
			},
			pod:  st.Pod("p", "1", "1Gi", st.WithClaims("shared")),
			want: map[string][]string{"n": nil},
		},
		{
			name:  "claims not bound yet count for their class's provisioner",
			nodes: []*corev1.Node{st.Node("n", "4", "8Gi")},
			pods:  []*corev1.Pod{st.Pod("running", "1", "1Gi", st.OnNode("n"), st.WithClaims("first"))},
			storage: snapshot.Input{
				PersistentVolumeClaims: []*corev1.PersistentVolumeClaim{st.UnboundClaim("first", "csi"), st.UnboundClaim("second", "csi")},
				StorageClasses:         []*storagev1.StorageClass{st.StorageClass("csi", attachDriver, waitForConsumer)},
				CSINodes:               []*storagev1.CSINode{st.CSINode("n", attachDriver, 1)},
			},
			pod:  st.Pod("p", "1", "1Gi", st.WithClaims("second")),
			want: map[string][]string{"n": {simulator.ReasonMaxVolumeCount}},
		},
		{
			name:  "pods with claims are not evaluated when the storage objects could not be read",
			nodes: twoZones,
			storage: snapshot.Input{
				StorageError: errors.New("listing PersistentVolumes of the cluster: forbidden"),
			},
			pod: st.Pod("p", "1", "1Gi", st.WithClaims("data")),
			want: map[string][]string{
				"a1": {"volumes not evaluated: listing PersistentVolumes of the cluster: forbidden"},
				"b1": {"volumes not evaluated: listing PersistentVolumes of the cluster: forbidden"},
			},
		},
		{
			name:  "pods without claims do not need the storage objects",
			nodes: twoZones,
			storage: snapshot.Input{
				StorageError: errors.New("listing PersistentVolumes of the cluster: forbidden"),
			},
			pod:  st.Pod("p", "1", "1Gi"),
			want: map[string][]string{"a1": nil, "b1": nil},
		},
		{
			name:  "a generic ephemeral volume waits for its claim",
			nodes: twoZones[:1],
			pod:   st.Pod("p", "1", "1Gi", st.WithEphemeralVolume("scratch")),
			want:  map[string][]string{"a1": {`waiting for ephemeral volume controller to create the persistentvolumeclaim "p-scratch"`}},
		},
		{
			name:  "a generic ephemeral volume's claim must be the pod's",
			nodes: twoZones[:1],
			storage: snapshot.Input{
				PersistentVolumeClaims: []*corev1.PersistentVolumeClaim{st.UnboundClaim("p-scratch", "zonal")},
				StorageClasses:         []*storagev1.StorageClass{st.StorageClass("zonal", attachDriver, waitForConsumer)},
			},
			pod:  st.Pod("p", "1", "1Gi", st.WithEphemeralVolume("scratch")),
			want: map[string][]string{"a1": {`PVC default/p-scratch was not created for pod default/p (pod is not owner)`}},
		},
		{
			name:  "a generic ephemeral volume's own claim is provisioned where its class allows",
			nodes: twoZones,
			storage: snapshot.Input{
				PersistentVolumeClaims: []*corev1.PersistentVolumeClaim{func() *corev1.PersistentVolumeClaim {
					claim := st.UnboundClaim("p-scratch", "zonal")
					claim.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "uid-p", Controller: ptr.To(true)}}
					return claim
				}()},
				StorageClasses: []*storagev1.StorageClass{st.StorageClass("zonal", attachDriver, waitForConsumer, "b")},
			},
			pod: st.Pod("p", "1", "1Gi", st.WithEphemeralVolume("scratch"), func(pod *corev1.Pod) {
				pod.UID = types.UID("uid-p")
			}),
			want: map[string][]string{"a1": {simulator.ReasonVolumeBindConflict}, "b1": nil},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, ctx := ktesting.NewTestContext(t)
			in := tt.storage
			in.Nodes, in.Pods = tt.nodes, tt.pods
			sched := simulator.NewScheduler(ctx, snapshot.New(in))
			got := map[string][]string{}
			for _, node := range tt.nodes {
				got[node.Name] = sched.Check(tt.pod, node.Name)
			}
			g.Expect(got).To(Equal(tt.want))
		})
	}
}

// TestAttachLimitsSpreadPodsOverNodes checks that pods each with a volume
// of a limited driver are placed no more per node than the limit allows.
func TestAttachLimitsSpreadPodsOverNodes(t *testing.T) {
	g := NewWithT(t)
	_, ctx := ktesting.NewTestContext(t)
	in := snapshot.Input{
		Nodes:    []*corev1.Node{st.Node("n1", "8", "16Gi"), st.Node("n2", "8", "16Gi"), st.Node("n3", "8", "16Gi")},
		CSINodes: []*storagev1.CSINode{st.CSINode("n1", attachDriver, 2), st.CSINode("n2", attachDriver, 2), st.CSINode("n3", attachDriver, 2)},
	}
	var pods []*corev1.Pod
	for _, name := range []string{"web-0", "web-1", "web-2", "web-3"} {
		claim := "data-" + name
		in.PersistentVolumeClaims = append(in.PersistentVolumeClaims, st.BoundClaim(claim, "pv-"+name))
		in.PersistentVolumes = append(in.PersistentVolumes, st.PersistentVolume("pv-"+name, st.BoundTo(claim), st.CSIVolume(attachDriver)))
		pods = append(pods, st.Pod(name, "100m", "128Mi", st.OwnedBy("web"), st.WithClaims(claim)))
	}
	sched := simulator.NewScheduler(ctx, snapshot.New(in))

	result := sched.SchedulePods(pods, simulator.ScheduleOptions{})

	g.Expect(result.Unschedulable).To(BeEmpty())
	perNode := map[string]int{}
	for _, placement := range result.Scheduled {
		perNode[placement.NodeName]++
	}
	g.Expect(perNode).To(Equal(map[string]int{"n1": 2, "n2": 2}), "two volumes per node, the limit")
}

func TestParseAttachLimits(t *testing.T) {
	g := NewWithT(t)
	limits, err := snapshot.ParseAttachLimits(" ebs.csi.aws.com=25 , efs.csi.aws.com=0")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(limits).To(Equal(snapshot.AttachLimits{"ebs.csi.aws.com": 25, "efs.csi.aws.com": 0}))
	g.Expect(limits.String()).To(Equal("ebs.csi.aws.com=25,efs.csi.aws.com=0"))

	for _, bad := range []string{"ebs.csi.aws.com", "ebs.csi.aws.com=many", "=3", "a=1,a=2", "a=-1"} {
		_, err := snapshot.ParseAttachLimits(bad)
		g.Expect(err).To(HaveOccurred(), bad)
	}
}
