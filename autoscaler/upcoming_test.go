package autoscaler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// A registered node that has not started yet carries the not-ready taint:
// pods cannot go there in the simulation, yet it is the node a pending pod
// waits for. Counting it as upcoming keeps the engine from asking for it
// twice.
func TestRegisteredNodesThatHaveNotStartedCountAsUpcoming(t *testing.T) {
	for _, tc := range []struct {
		name       string
		conditions []corev1.NodeCondition
		why        string
	}{
		{
			name:       "NotReady",
			conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}},
			why:        "the pending pod waits for the node that is starting",
		},
		{
			// The node lifecycle controller removes the not-ready taint only
			// some seconds after the node reports Ready.
			name: "Ready with the not-ready taint",
			why:  "the pending pod waits for the node whose not-ready taint is not removed yet",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
			nodes := group.addNodes(2)
			full := st.Pod("full-0", "4", "1Gi", st.OwnedBy("full"), st.OnNode(nodes[0].Name))
			starting := nodes[1]
			starting.CreationTimestamp = metav1.NewTime(st.Now)
			if tc.conditions != nil {
				starting.Status.Conditions = tc.conditions
			}
			starting.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}}
			f := newFixture(t, []*fakeGroup{group}, objects(nodes, full, st.Pod("web-0", "3", "1Gi", st.OwnedBy("web")))...)

			status := f.runOnce(t)

			g.Expect(group.increases).To(BeEmpty(), tc.why)
			row := groupRow(status, group.id)
			g.Expect(row.NotStarted).To(Equal(1))
			g.Expect(row.Upcoming).To(Equal(1))
		})
	}
}

// startingNodeFixture is a group of two nodes, one full and one that
// registered and has not started, with a pending pod that fits only on
// the starting one.
func startingNodeFixture(t *testing.T, pending *corev1.Pod) (*fixture, *corev1.Node) {
	t.Helper()
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
	nodes := group.addNodes(2)
	full := st.Pod("full-0", "4", "1Gi", st.OwnedBy("full"), st.OnNode(nodes[0].Name))
	starting := nodes[1]
	starting.CreationTimestamp = metav1.NewTime(st.Now)
	starting.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
	starting.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}}
	return newFixture(t, []*fakeGroup{group}, objects(nodes, full, pending)...), starting
}

// statusPatches counts the writes of pods' status.
func statusPatches(f *fixture) int {
	patches := 0
	for _, action := range f.clientset.Actions() {
		if action.GetVerb() == "patch" && action.GetResource().Resource == "pods" && action.GetSubresource() == "status" {
			patches++
		}
	}
	return patches
}

// kube-scheduler places pods its own way once starting nodes start: the
// oldest pods fill the first nodes to start. A pod the plan gave a node
// that is starting is nominated to it, so that kube-scheduler tries that
// node first and keeps its room (KEP-5278): while the node is not Ready,
// and once it is, until it loses the taints that keep pods off it, its
// not-ready taint (the node lifecycle controller lifts it a while after
// the node turned Ready) or a startup taint (issue 51).
func TestPodWaitingForAStartingNodeIsNominatedToIt(t *testing.T) {
	ready := []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	for _, tc := range []struct {
		name       string
		conditions []corev1.NodeCondition
		taint      string
	}{
		{name: "NotReady"},
		{name: "Ready with the not-ready taint", conditions: ready, taint: corev1.TaintNodeNotReady},
		{name: "Ready with a startup taint", conditions: ready, taint: nodefacts.StartupTaintPrefix + "cni"},
		{name: "Ready with Cluster API's uninitialized taint", conditions: ready, taint: nodefacts.ClusterAPIUninitializedTaint},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			f, starting := startingNodeFixture(t, st.Pod("web-0", "3", "1Gi", st.OwnedBy("web")))
			if tc.conditions != nil {
				starting.Status.Conditions = tc.conditions
				starting.Spec.Taints = []corev1.Taint{{Key: tc.taint, Effect: corev1.TaintEffectNoSchedule}}
				g.Expect(f.cluster.Update(context.Background(), starting)).To(Succeed())
			}

			f.runOnce(t)

			pod, err := f.clientset.CoreV1().Pods("default").Get(context.Background(), "web-0", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pod.Status.NominatedNodeName).To(Equal(starting.Name), "the pod is nominated to the starting node planned for it")
		})
	}
}

// A pod that already carries its nomination is not written again, and a
// pod placed on a node that takes pods now is left to kube-scheduler.
func TestNominationsAreWrittenOnlyWhenMissing(t *testing.T) {
	g := NewWithT(t)
	nominated := st.Pod("web-0", "3", "1Gi", st.OwnedBy("web"))
	f, starting := startingNodeFixture(t, nominated)
	nominated.Status.NominatedNodeName = starting.Name
	g.Expect(f.cluster.Status().Update(context.Background(), nominated)).To(Succeed())

	f.runOnce(t)

	g.Expect(statusPatches(f)).To(BeZero())
}

// A cluster whose role does not let the autoscaler write pods' status
// refuses the first nomination; the autoscaler goes on without them and
// does not ask again in every loop.
func TestRefusedNominationIsNotTriedAgain(t *testing.T) {
	g := NewWithT(t)
	f, _ := startingNodeFixture(t, st.Pod("web-0", "3", "1Gi", st.OwnedBy("web")))
	f.clientset.PrependReactor("patch", "pods", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "status" {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(corev1.Resource("pods/status"), "web-0", errors.New("no RBAC"))
	})

	f.runOnce(t)
	f.clock.Step(time.Second)
	status := f.runOnce(t)

	g.Expect(statusPatches(f)).To(Equal(1), "one refused nomination, then none")
	g.Expect(groupRow(status, "MachineDeployment/default/md-0").Upcoming).To(Equal(1), "the loop goes on")
}

// expectedNodeFixture is a group whose one node is full and whose second
// machine is booting, with a pending pod that fits only there. Its nodes
// are named after their machines when namedAfterMachines.
func expectedNodeFixture(t *testing.T, namedAfterMachines bool) *fixture {
	t.Helper()
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
	nodes := group.addNodes(1)
	if namedAfterMachines {
		group.instances[0].Name = nodes[0].Name
	} else {
		group.instances[0].Name = "machine-of-" + nodes[0].Name
	}
	group.instances = append(group.instances, nodegroups.Instance{ID: "fake://booting", Name: "md-0-booting", State: nodegroups.InstanceCreating, Removable: true})
	group.target++
	full := st.Pod("full-0", "4", "1Gi", st.OwnedBy("full"), st.OnNode(nodes[0].Name))
	return newFixture(t, []*fakeGroup{group}, objects(nodes, full, st.Pod("web-0", "3", "1Gi", st.OwnedBy("web")))...)
}

// Where a group's nodes are named after their machines, the pods planned
// for a machine that is booting are nominated to the node it will
// register, so that kube-scheduler keeps them together as planned however
// the nodes of a burst come up.
func TestPodWaitingForAMachineWhoseNodeNameIsKnownIsNominatedToIt(t *testing.T) {
	g := NewWithT(t)
	f := expectedNodeFixture(t, true)

	status := f.runOnce(t)

	g.Expect(groupRow(status, "MachineDeployment/default/md-0").Upcoming).To(Equal(1))
	pod, err := f.clientset.CoreV1().Pods("default").Get(context.Background(), "web-0", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pod.Status.NominatedNodeName).To(Equal("md-0-booting"))
}

// Where a group's nodes are not named after their machines, the name of a
// booting machine's node is not known: nothing is nominated.
func TestNothingIsNominatedToMachinesWhoseNodeNameIsUnknown(t *testing.T) {
	g := NewWithT(t)
	f := expectedNodeFixture(t, false)

	f.runOnce(t)

	g.Expect(statusPatches(f)).To(BeZero())
}

// A machine's node registers before Cluster API links the two (the
// Machine learns its provider ID a moment later): for that moment the
// node belongs to no group, yet it is the node on its way that pods were
// planned for. They stay nominated to it, not to a copy of the group's
// template under another name (issue 51): kube-scheduler cleared their
// nominations then, and nothing wrote them back until the link, while
// pods planned for other nodes took their room once the node started.
func TestPodWaitingForANodeRegisteredBeforeItsMachineKnowsItIsNominatedToIt(t *testing.T) {
	g := NewWithT(t)
	f := expectedNodeFixture(t, true)
	registered := st.Node("md-0-booting", "4", "16Gi")
	registered.CreationTimestamp = metav1.NewTime(st.Now)
	registered.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	registered.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}}
	g.Expect(f.cluster.Create(context.Background(), registered)).To(Succeed())

	status := f.runOnce(t)

	g.Expect(groupRow(status, "MachineDeployment/default/md-0").Upcoming).To(Equal(1))
	g.Expect(f.provider.groups[0].increases).To(BeEmpty(), "the pod waits for the node that registered")
	g.Expect(nominatedNode(t, f, "web-0")).To(Equal("md-0-booting"))
}
