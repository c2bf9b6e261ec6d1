package autoscaler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// demoGroups are the groups of hack/demo: md-general of 2-cpu nodes at its
// one node, named after its machine, and md-large of 8-cpu nodes at zero.
func demoGroups() (general, large *fakeGroup, nodes []*corev1.Node) {
	general = &fakeGroup{id: "MachineDeployment/default/md-general", min: 1, max: 6, template: st.Node("general-template", "2", "4Gi")}
	large = &fakeGroup{id: "MachineDeployment/default/md-large", max: 3, template: st.Node("large-template", "8", "32Gi")}
	node := st.Node("md-general-0", "2", "4Gi")
	general.instances = []nodegroups.Instance{{ID: "fake://md-general-0", Name: node.Name, NodeName: node.Name, State: nodegroups.InstanceRunning, Removable: true}}
	general.target = 1
	return general, large, []*corev1.Node{node}
}

// demoWorkload is hack/demo's: six web pods of 1.5 cpu, one of them
// running on md-general's node, and a batch pod that fits only md-large.
func demoWorkload() []*corev1.Pod {
	pods := []*corev1.Pod{st.Pod("web-0", "1500m", "3Gi", st.OwnedBy("web"), st.OnNode("md-general-0"))}
	for i := 1; i < 6; i++ {
		pods = append(pods, st.Pod(fmt.Sprintf("web-%d", i), "1500m", "3Gi", st.OwnedBy("web")))
	}
	return append(pods, st.Pod("batch-0", "6", "24Gi", st.OwnedBy("batch")))
}

// boot gives group a machine on its way, named name, as Cluster API
// creates one after a scale-up.
func boot(group *fakeGroup, name string) {
	group.instances = append(group.instances, nodegroups.Instance{ID: "fake://" + name, Name: name, State: nodegroups.InstanceCreating, Removable: true})
}

// register has the machine of group named as node register it, Ready.
func register(t *testing.T, f *fixture, group *fakeGroup, node *corev1.Node) {
	t.Helper()
	for i := range group.instances {
		if group.instances[i].Name == node.Name {
			group.instances[i].NodeName, group.instances[i].State = node.Name, nodegroups.InstanceRunning
		}
	}
	if err := f.cluster.Create(context.Background(), node); err != nil {
		t.Fatal(err)
	}
}

// bind has kube-scheduler bind the pending pod to node.
func bind(t *testing.T, f *fixture, name, node string) {
	t.Helper()
	pod := &corev1.Pod{}
	if err := f.cluster.Get(context.Background(), types.NamespacedName{Namespace: "default", Name: name}, pod); err != nil {
		t.Fatal(err)
	}
	st.OnNode(node)(pod)
	if err := f.cluster.Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if err := f.cluster.Status().Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
}

// nominatedNode is the node the pod is nominated to in the cluster.
func nominatedNode(t *testing.T, f *fixture, name string) string {
	t.Helper()
	pod, err := f.clientset.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod.Status.NominatedNodeName
}

// demoFixture is hack/demo's cluster after the first loop's scale-up, with
// the machines of the scale-up booting.
func demoFixture(t *testing.T) (f *fixture, general, large *fakeGroup) {
	t.Helper()
	g := NewWithT(t)
	general, large, nodes := demoGroups()
	f = newFixture(t, []*fakeGroup{general, large}, objects(nodes, demoWorkload()...)...)

	f.runOnce(t)
	g.Expect(general.increases).To(Equal([]int{5}), "least-waste: one 2-cpu node per web pod")
	g.Expect(large.increases).To(Equal([]int{1}), "the batch pod fits only md-large")
	for i := 1; i <= 5; i++ {
		boot(general, fmt.Sprintf("md-general-%d", i))
	}
	boot(large, "md-large-0")
	f.clock.Step(time.Second)
	return f, general, large
}

// Nodes of a burst register in any order. The first md-large node
// must keep the room of the batch pod planned for it from the web pods
// planned for md-general nodes that have not registered yet: kube-scheduler
// keeps that room for the pod nominated there. md-large has no node yet
// to show how its nodes are named, but the cluster's nodes are named after
// their machines: so will md-large's be.
func TestPodWaitingForTheFirstMachineOfAGroupIsNominatedToIt(t *testing.T) {
	g := NewWithT(t)
	f, _, _ := demoFixture(t)

	f.runOnce(t)

	g.Expect(nominatedNode(t, f, "batch-0")).To(Equal("md-large-0"), "the batch pod keeps its room on md-large's first node")
	g.Expect(nominatedNode(t, f, "web-1")).To(HavePrefix("md-general-"), "the web pods wait for md-general's machines")
}

// When md-large's node registers first and kube-scheduler binds a web pod
// planned for md-general there, the pods still pending fit the nodes on
// their way and the room left on md-large's node: nothing more is bought.
func TestPlanHoldsWhenAPodBindsToANodePlannedForAnother(t *testing.T) {
	g := NewWithT(t)
	f, general, large := demoFixture(t)
	f.runOnce(t)
	register(t, f, large, st.Node("md-large-0", "8", "32Gi"))
	bind(t, f, "web-1", "md-large-0")
	f.clock.Step(time.Second)

	status := f.runOnce(t)

	g.Expect(large.increases).To(Equal([]int{1}), "the batch pod fits beside the web pod")
	g.Expect(general.increases).To(Equal([]int{5}))
	g.Expect(groupRow(status, general.id).Upcoming).To(Equal(5))
}

// runInBackground runs the fixture's engine as the manager does until the
// test ends. Its first loop runs at once; no other runs until the fake
// clock is stepped or the engine triggered.
func runInBackground(t *testing.T, f *fixture) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = f.engine.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// setNomination has kube-scheduler set the pod's nominated node to node,
// "" to clear it, as it does after a failed attempt, and tells the engine
// as its pod informer does.
func setNomination(t *testing.T, f *fixture, name, node string) {
	t.Helper()
	pods := f.clientset.CoreV1().Pods("default")
	old, err := pods.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	changed := old.DeepCopy()
	changed.Status.NominatedNodeName = node
	changed, err = pods.UpdateStatus(context.Background(), changed, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.engine.PodUpdated(snapshot.NewPod(old), snapshot.NewPod(changed))
}

// kube-scheduler clears the nomination of a pod on each failed attempt, as
// when another node registers before the pod's own. Until it is back,
// kube-scheduler keeps no room for the pod there, and pods planned for
// nodes still on their way can take it as soon as the node starts: the
// engine writes it back as soon as it hears of the clearing, not a loop
// later (issue 47).
func TestNominationClearedByKubeSchedulerIsWrittenBackBeforeTheNextLoop(t *testing.T) {
	g := NewWithT(t)
	f, _, _ := demoFixture(t)
	runInBackground(t, f)
	g.Eventually(func() string { return nominatedNode(t, f, "batch-0") }).Should(Equal("md-large-0"), "the first loop nominates the batch pod")
	// It writes its nominations before it ends: wait for its end.
	loop := f.clock.Now()
	g.Eventually(func() time.Time { return f.engine.Status().Time }).Should(Equal(loop), "the first loop ends")

	setNomination(t, f, "batch-0", "")

	g.Eventually(func() string { return nominatedNode(t, f, "batch-0") }).Should(Equal("md-large-0"),
		"the batch pod keeps its room on md-large's node while the node is on its way")
	g.Expect(f.engine.Status().Time).To(Equal(loop), "no loop ran in between")
}

// A nomination kube-scheduler sets, for preemption on a node that
// exists, is its own: the engine does not write its plan over it, nor
// back once kube-scheduler clears it.
func TestNominationOfKubeSchedulerIsLeftToIt(t *testing.T) {
	g := NewWithT(t)
	f, _, _ := demoFixture(t)
	runInBackground(t, f)
	g.Eventually(func() string { return nominatedNode(t, f, "web-1") }).Should(HavePrefix("md-general-"))

	setNomination(t, f, "web-1", "md-general-0")
	g.Consistently(func() string { return nominatedNode(t, f, "web-1") }, 200*time.Millisecond).Should(Equal("md-general-0"))
	setNomination(t, f, "web-1", "")
	g.Consistently(func() string { return nominatedNode(t, f, "web-1") }, 200*time.Millisecond).Should(BeEmpty())
}

// In DryRun mode the engine writes nothing to the cluster: once a loop in
// DryRun mode ran, the nominations of the Active loops before it are no
// longer written back.
func TestDryRunWritesNoNominationBack(t *testing.T) {
	g := NewWithT(t)
	f, _, _ := demoFixture(t)
	runInBackground(t, f)
	g.Eventually(func() string { return nominatedNode(t, f, "batch-0") }).Should(Equal("md-large-0"))
	config := autoscaler.DefaultConfig()
	config.DryRun = true
	f.engine.Apply(mustSettings(t, config, f.clock))
	g.Eventually(func() bool {
		f.engine.Trigger()
		f.clock.Step(50 * time.Millisecond)
		return f.engine.Status().DryRun
	}).Should(BeTrue(), "a loop in DryRun mode")

	setNomination(t, f, "batch-0", "")

	g.Consistently(func() string { return nominatedNode(t, f, "batch-0") }, 200*time.Millisecond).Should(BeEmpty())
}

// A loop that both nominates pods to the machines on their way and buys
// more writes the increase first: the nominations, up to a few dozen pod
// writes on the client's rate limit, hold the new machines back by as
// long, and the nodes of a burst then become Ready that much further
// apart (issue 51), while a nomination waits for a machine that boots for
// the better part of a minute.
func TestLoopIncreasesBeforeItNominates(t *testing.T) {
	g := NewWithT(t)
	f, general, large := demoFixture(t)
	// Two more web pods: one fits beside the batch pod on md-large's
	// machine, the other needs a machine more.
	for _, name := range []string{"web-6", "web-7"} {
		late := st.Pod(name, "1500m", "3Gi", st.OwnedBy("web"))
		g.Expect(f.cluster.Create(context.Background(), late.DeepCopy())).To(Succeed())
		_, err := f.clientset.CoreV1().Pods("default").Create(context.Background(), late, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	var increasesBefore []int
	f.clientset.PrependReactor("patch", "pods", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() == "status" {
			increasesBefore = append(increasesBefore, len(general.increases)+len(large.increases))
		}
		return false, nil, nil
	})

	f.runOnce(t)

	g.Expect(len(general.increases)+len(large.increases)).To(Equal(3), "a machine more for the late web pods")
	g.Expect(increasesBefore).NotTo(BeEmpty(), "the pods waiting for the machines on their way are nominated")
	g.Expect(increasesBefore).To(HaveEach(3), "every nomination is written after the loop's increase")
}
