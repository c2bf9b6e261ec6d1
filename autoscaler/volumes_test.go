package autoscaler_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

const attachDriver = "attach.csi.example.com"

func zoneTemplate(zone string) *corev1.Node {
	return st.Node("template", "4", "16Gi", st.WithNodeLabels(corev1.LabelTopologyZone, zone))
}

func TestPodWithAZonalVolumeGrowsTheGroupOfItsZone(t *testing.T) {
	g := NewWithT(t)
	zoneA := &fakeGroup{id: "MachineDeployment/default/md-a", max: 10, template: zoneTemplate("a")}
	zoneB := &fakeGroup{id: "MachineDeployment/default/md-b", max: 10, template: zoneTemplate("b")}
	pod := st.Pod("db-0", "1", "1Gi", st.OwnedBy("db"), st.WithClaims("data-db-0"))
	f := newFixture(t, []*fakeGroup{zoneA, zoneB},
		pod,
		st.BoundClaim("data-db-0", "pv-db-0"),
		st.PersistentVolume("pv-db-0", st.BoundTo("data-db-0"), st.RequiringNode(corev1.LabelTopologyZone, "b")),
	)

	f.runOnce(t)

	g.Expect(zoneA.increases).To(BeEmpty(), "the volume cannot be reached from zone a")
	g.Expect(zoneB.increases).To(Equal([]int{1}))
}

func TestAttachLimitsOfATemplateFromZeroDecideHowManyNodes(t *testing.T) {
	g := NewWithT(t)
	template := templateNode()
	template.Annotations = map[string]string{snapshot.AttachLimitsAnnotation: attachDriver + "=2"}
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: template}
	objects := []client.Object{}
	for i := range 4 {
		name := fmt.Sprintf("web-%d", i)
		objects = append(objects,
			st.Pod(name, "100m", "128Mi", st.OwnedBy("web"), st.WithClaims("data-"+name)),
			st.BoundClaim("data-"+name, "pv-"+name),
			st.PersistentVolume("pv-"+name, st.BoundTo("data-"+name), st.CSIVolume(attachDriver)))
	}
	f := newFixture(t, []*fakeGroup{group}, objects...)

	f.runOnce(t)

	g.Expect(group.increases).To(Equal([]int{2}), "four small pods, two volumes a node")
}

func TestPodsWithClaimsThatCannotBeEvaluatedAreReportedNotGuessed(t *testing.T) {
	for _, failure := range readFailures(&corev1.PersistentVolumeList{}) {
		t.Run(failure.name, func(t *testing.T) {
			g := NewWithT(t)
			group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
			f := newFixture(t, []*fakeGroup{group},
				st.Pod("db-0", "1", "1Gi", st.OwnedBy("db"), st.WithClaims("data-db-0")),
				st.Pod("web", "1", "1Gi", st.OwnedBy("web")),
			)
			engine := f.engineReading(t, failure.cluster(f.cluster))

			status := engine.RunOnce(context.Background(), f.clock.Now())

			g.Expect(status.Err).NotTo(HaveOccurred(), "the loop goes on without the storage objects")
			g.Expect(group.increases).To(Equal([]int{1}), "one node for the pod without claims")
			g.Expect(status.NotTriggerScaleUpReasons).To(ConsistOf(HaveField("Reason", ContainSubstring("volumes not evaluated: listing PersistentVolumes of the cluster: "+failure.err))))
			g.Expect(f.podEvents()).To(ContainElement(And(
				ContainSubstring("NotTriggerScaleUp"), ContainSubstring("volumes not evaluated"))))
		})
	}
}

func TestMissingClaimIsNamedInNotTriggerScaleUp(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
	f := newFixture(t, []*fakeGroup{group},
		st.Pod("db-0", "1", "1Gi", st.OwnedBy("db"), st.WithClaims("data-db-0")),
		st.StorageClass("standard", attachDriver, storagev1.VolumeBindingWaitForFirstConsumer),
	)

	status := f.runOnce(t)

	g.Expect(group.increases).To(BeEmpty())
	g.Expect(status.NotTriggerScaleUpReasons).To(ConsistOf(HaveField("Reason", ContainSubstring(`persistentvolumeclaim "data-db-0" not found`))))
}

// readFailure is a way the lists of one kind go wrong.
type readFailure struct {
	name string
	// cluster wraps the fixture's reader.
	cluster func(client.Reader) client.Reader
	// err is what the lists return.
	err string
}

// readFailures are the ways lists like list go wrong: they fail, as an
// RBAC denial does, or they hang until the read's context ends, as a
// cache's do when RBAC keeps their informer from syncing.
func readFailures(list client.ObjectList) []readFailure {
	return []readFailure{
		{
			name:    "a list that fails, as an RBAC denial does",
			cluster: func(reader client.Reader) client.Reader { return failingList{Reader: reader, fails: list} },
			err:     "forbidden",
		},
		{
			name:    "a list that hangs, as a cache's does",
			cluster: func(reader client.Reader) client.Reader { return hangingList{Reader: reader, hangs: list} },
			err:     "context deadline exceeded",
		},
	}
}

// failingList is a cluster whose lists of one kind fail as an RBAC denial
// does.
type failingList struct {
	client.Reader
	fails client.ObjectList
}

func (f failingList) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if fmt.Sprintf("%T", list) == fmt.Sprintf("%T", f.fails) {
		return errors.New("forbidden")
	}
	return f.Reader.List(ctx, list, opts...)
}

// hangingList is a cluster whose lists of one kind wait until their
// context ends.
type hangingList struct {
	client.Reader
	hangs client.ObjectList
}

func (h hangingList) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if fmt.Sprintf("%T", list) == fmt.Sprintf("%T", h.hangs) {
		<-ctx.Done()
		return ctx.Err()
	}
	return h.Reader.List(ctx, list, opts...)
}
