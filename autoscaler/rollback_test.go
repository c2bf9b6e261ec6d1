package autoscaler_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/provisioning"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// machine gives the group an instance without a node, as Cluster API
// creates a Machine: named name, created by owner at created.
func (g *fakeGroup) machine(name, owner string, created time.Time) {
	g.instances = append(g.instances, nodegroups.Instance{ID: "fake://" + name, Name: name, State: nodegroups.InstanceCreating,
		Removable: true, Owner: owner, Created: created.Truncate(time.Second)})
}

// fail has the group's instance named name fail, as a Machine whose
// infrastructure could not be provisioned.
func (g *fakeGroup) fail(name string) {
	for i := range g.instances {
		if g.instances[i].Name == name {
			g.instances[i].Error = &nodegroups.InstanceError{Reason: "InfrastructureProvisioningFailed", Message: "no capacity"}
		}
	}
}

// A rollback takes back the instances of its own scale-up and no other:
// new instances are credited to the increases of the group, oldest first,
// by when the API server created them and which MachineSet did, whatever
// their names.
func TestARollbackTakesBackOnlyItsOwnInstances(t *testing.T) {
	const ms = "MachineSet/a-1"
	for _, tc := range []struct {
		name string
		// arrange has the engine start the request's scale-up of 2 nodes
		// at st.Now, and creates the Machines of the group that appear
		// since; it returns the request's.
		arrange func(t *testing.T, f *fixture, group *fakeGroup) (ours []string)
	}{
		{
			name: "a regular scale-up one loop after the atomic one",
			arrange: func(t *testing.T, f *fixture, group *fakeGroup) []string {
				f.runOnce(t)
				web := st.Pod("web-0", "2", "1Gi", st.OwnedBy("web"))
				if err := f.cluster.Create(context.Background(), web); err != nil {
					t.Fatal(err)
				}
				f.clock.Step(10 * time.Second)
				f.runOnce(t)
				NewWithT(t).Expect(group.increases).To(Equal([]int{2, 1}), "the pod gets a node of its own")
				// The loop sees the three Machines at once: the request's,
				// created while the second loop read the cluster, and the
				// pod's, created after it wrote, whose name sorts first.
				group.machine("a-aaaaa", ms, st.Now.Add(12*time.Second))
				group.machine("a-xxxxx", ms, st.Now.Add(9*time.Second))
				group.machine("a-yyyyy", ms, st.Now.Add(9*time.Second))
				return []string{"a-xxxxx", "a-yyyyy"}
			},
		},
		{
			name: "a Machine of another MachineSet",
			arrange: func(t *testing.T, f *fixture, group *fakeGroup) []string {
				f.runOnce(t)
				// E.g. the first of a rollout's new MachineSet.
				group.machine("a-aaaaa", "MachineSet/a-2", st.Now.Add(2*time.Second))
				group.machine("a-xxxxx", ms, st.Now.Add(2*time.Second))
				group.machine("a-yyyyy", ms, st.Now.Add(2*time.Second))
				return []string{"a-xxxxx", "a-yyyyy"}
			},
		},
		{
			name: "a Machine created before the increase, after the loop read the group",
			arrange: func(t *testing.T, f *fixture, group *fakeGroup) []string {
				f.runOnce(t)
				// E.g. a replacement that remediation asked for.
				group.machine("a-aaaaa", ms, st.Now.Add(-time.Second))
				group.machine("a-xxxxx", ms, st.Now.Add(2*time.Second))
				group.machine("a-yyyyy", ms, st.Now.Add(2*time.Second))
				return []string{"a-xxxxx", "a-yyyyy"}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			group := &fakeGroup{id: "MachineDeployment/default/a", max: 10, template: templateNode()}
			existing := group.addNodes(1)
			group.instances[0].Owner = ms
			busy := st.Pod("busy-0", "4", "1Gi", st.OwnedBy("busy"), st.OnNode(existing[0].Name))
			requests := &fakeRequests{requests: []provisioning.Request{atomicOf(4)}}
			f := newFixture(t, []*fakeGroup{group}, objects(existing, busy)...).withRequests(t, requests)

			ours := tc.arrange(t, f, group)
			f.clock.Step(10 * time.Second)
			f.runOnce(t)
			g.Expect(requests.answer("job").ScaleUp.Instances).To(HaveKeyWithValue(group.id, ConsistOf(ours)), "the request's Machines, and only them")

			group.fail(ours[0])
			f.clock.Step(10 * time.Second)
			f.runOnce(t)

			g.Expect(requests.answer("job").Outcome).To(Equal(provisioning.ScaleUpFailed))
			g.Expect(group.deletedInstances).To(ConsistOf("fake://"+ours[0], "fake://"+ours[1]))
			g.Expect(group.instances).To(ContainElement(HaveField("Name", "a-aaaaa")), "the other Machine stays")
		})
	}
}

// A node of a failed scale-up is removed the way scale-down removes an
// empty node: tainted first, and its pods read from the API server, so
// that a pod of the request bound to it since the loop read the cluster
// keeps it; the next loop, whose cache has the pod, leaves it to
// scale-down.
func TestARollbackKeepsANodeAPodWasBoundToSinceTheCacheWasRead(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/a", max: 10, template: templateNode()}
	requests := &fakeRequests{requests: []provisioning.Request{atomicOf(4)}}
	f := newFixture(t, []*fakeGroup{group}).withRequests(t, requests)
	f.runOnce(t)
	f.appear(group)
	group.instances = group.instances[:1]
	f.register(t, group)
	f.appear(group)
	group.fail(group.instances[1].Name)
	node := group.instances[0].NodeName

	consumer := st.Pod("job-0", "2", "1Gi", st.OwnedBy("job"), st.OnNode(node))
	consumer.Annotations = map[string]string{provisioning.ConsumeAnnotations[0]: "job"}
	if _, err := f.clientset.CoreV1().Pods(consumer.Namespace).Create(context.Background(), consumer, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.clock.Step(time.Minute)
	f.runOnce(t)

	g.Expect(group.deletedNodes).To(BeEmpty(), "the API server says a pod runs there")
	live, err := f.clientset.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(live.Spec.Taints).To(BeEmpty(), "released")
	g.Expect(requests.answer("job").Outcome).To(Equal(provisioning.ScalingUp), "still rolling back")

	// The cache catches up.
	g.Expect(f.cluster.Create(context.Background(), consumer.DeepCopy())).To(Succeed())
	f.clock.Step(10 * time.Second)
	f.runOnce(t)
	g.Expect(group.deletedNodes).To(BeEmpty())
	g.Expect(requests.answer("job")).To(SatisfyAll(
		HaveField("Outcome", provisioning.ScaleUpFailed),
		HaveField("Message", ContainSubstring("but for 1 that run pods"))))
}

// An atomic scale-up is never added to a group whose instances cannot be
// removed one by one (a MachinePool without MachinePool Machines, whose
// infrastructure chooses which instances go when replicas are lowered):
// it could not be taken back. The request says why, and another group
// serves it when one can.
func TestAnAtomicRequestIsRefusedOnGroupsThatCannotTakeBackChosenInstances(t *testing.T) {
	for _, tc := range []struct {
		name         string
		withMachines bool
		wantOutcome  provisioning.Outcome
	}{
		{name: "alone", wantOutcome: provisioning.NotFound},
		{name: "beside a group of Machines", withMachines: true, wantOutcome: provisioning.ScalingUp},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			pool := &fakeGroup{id: "MachinePool/default/pool", max: 10, template: templateNode(), machineless: true}
			groups := []*fakeGroup{pool}
			deployment := &fakeGroup{id: "MachineDeployment/default/md", max: 10, template: templateNode()}
			if tc.withMachines {
				groups = append(groups, deployment)
			}
			requests := &fakeRequests{requests: []provisioning.Request{atomicOf(4)}}
			f := newFixture(t, groups).withRequests(t, requests)

			f.runOnce(t)

			g.Expect(pool.increases).To(BeEmpty())
			g.Expect(requests.answer("job").Outcome).To(Equal(tc.wantOutcome))
			if tc.withMachines {
				g.Expect(deployment.increases).To(Equal([]int{2}))
			} else {
				g.Expect(requests.answer("job").Message).To(ContainSubstring("cannot be removed one by one"))
			}
		})
	}
}

// timedOutScaleUp has the engine start an atomic scale-up of 2 nodes in
// group, at the fixture's time, only one of whose Machines is created,
// and registers an empty node: the next loop, 15 minutes later, finds that
// the scale-up timed out and starts rolling it back.
func timedOutScaleUp(t *testing.T, f *fixture, group *fakeGroup) {
	t.Helper()
	f.runOnce(t)
	NewWithT(t).Expect(group.increases).To(Equal([]int{2}))
	f.appear(group)
	group.instances = group.instances[:len(group.instances)-1]
	f.register(t, group)
	f.clock.Step(15 * time.Minute)
}

// A rollback that cannot finish (its group refuses the removal all along)
// gives up after 10 minutes: the request fails saying what is left, and
// the ClusterAutoscaler's status says it while what is left is there.
func TestARollbackThatCannotFinishGivesUp(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/a", max: 10, template: templateNode()}
	requests := &fakeRequests{requests: []provisioning.Request{atomicOf(4)}}
	f := newFixture(t, []*fakeGroup{group}).withRequests(t, requests)
	timedOutScaleUp(t, f, group)
	group.scaleDownRefusal = &nodegroups.RefusedError{Reason: "MachineDeployment/default/a is rolling out"}

	f.runOnce(t)
	g.Expect(requests.answer("job")).To(SatisfyAll(
		HaveField("Outcome", provisioning.ScalingUp),
		HaveField("Message", ContainSubstring("rolling back, 1 instance(s) left to remove"))))
	g.Expect(group.decreases).To(Equal([]int{1}), "the size never created is given up once")
	f.clock.Step(9 * time.Minute)
	f.runOnce(t)
	g.Expect(requests.answer("job").Outcome).To(Equal(provisioning.ScalingUp))

	f.clock.Step(time.Minute)
	status := f.runOnce(t)
	left := group.instances[0].Name
	g.Expect(requests.answer("job")).To(SatisfyAll(
		HaveField("Outcome", provisioning.ScaleUpFailed),
		HaveField("Message", ContainSubstring("the rollback could not remove "+left+" of "+group.id+" within 10m0s"))))
	g.Expect(status.UnfinishedRollbacks).To(ConsistOf(ContainSubstring("ProvisioningRequest default/job: the rollback could not remove " + left)))
	g.Expect(f.groupRecorder.reasons(group.id)).To(ContainElement(autoscaler.EventScaleUpRollbackIncomplete))
	g.Expect(group.deletedNodes).To(BeEmpty())

	// Once what it left is gone, the status no longer tells it.
	group.instances = nil
	f.clock.Step(10 * time.Second)
	g.Expect(f.runOnce(t).UnfinishedRollbacks).To(BeEmpty())
}

// atomicRequestBesideAnUnneededNode is a cluster where an atomic request
// of 4 pods grows group, and other has an unneeded node, dedicated to pods
// that the request's do not tolerate.
func atomicRequestBesideAnUnneededNode(t *testing.T) (f *fixture, requests *fakeRequests, group, other *fakeGroup, unneeded []*corev1.Node) {
	t.Helper()
	group = &fakeGroup{id: "MachineDeployment/default/a", max: 10, template: templateNode()}
	other = &fakeGroup{id: "MachineDeployment/default/b", max: 1, template: templateNode()}
	unneeded = other.addNodes(1, st.WithTaint("dedicated", "other", corev1.TaintEffectNoSchedule))
	requests = &fakeRequests{requests: []provisioning.Request{atomicOf(4)}}
	f = newFixture(t, []*fakeGroup{group, other}, objects(unneeded)...).withRequests(t, requests)
	return f, requests, group, other, unneeded
}

// While a rollback cannot finish, the groups it does not touch scale down
// as usual.
func TestScaleDownGoesOnBesideARollback(t *testing.T) {
	g := NewWithT(t)
	f, requests, group, other, unneeded := atomicRequestBesideAnUnneededNode(t)
	timedOutScaleUp(t, f, group)
	group.scaleDownRefusal = &nodegroups.RefusedError{Reason: "MachineDeployment/default/a is rolling out"}

	// Past delayAfterAdd after the scale-up, and unneededTime, and
	// within the rollback's 10 minutes.
	for range 5 {
		f.runOnce(t)
		f.clock.Step(time.Minute)
	}

	g.Expect(requests.answer("job").Outcome).To(Equal(provisioning.ScalingUp), "still rolling back")
	g.Expect(other.deletedNodes).To(ConsistOf(unneeded[0].Name))
	g.Expect(group.deletedNodes).To(BeEmpty())
	node, err := f.clientset.CoreV1().Nodes().Get(context.Background(), group.instances[0].NodeName, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(node.Spec.Taints).NotTo(ContainElement(HaveField("Key", nodefacts.ToBeDeletedTaint)), "the refused removal left no taint")
}
