package clusterapi

import (
	"context"
	"errors"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	deprecatederrors "sigs.k8s.io/cluster-api/api/deprecated/errors" //nolint:staticcheck // SA1019: tests the detection of v1beta1 Machine failures.
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/ownership"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/envtest"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
	"github.com/capi-autoscaler/capi-autoscaler/template"
)

const keepFinalizer = "test.capi-autoscaler.io/keep"

func sizeAnnotations(minSize, maxSize int) map[string]string {
	return map[string]string{scalable.MinSizeAnnotation: strconv.Itoa(minSize), scalable.MaxSizeAnnotation: strconv.Itoa(maxSize)}
}

var _ = Describe("Provider", func() {
	var (
		ctx context.Context
		f   *envtest.Fixture
	)

	BeforeEach(func() {
		ctx = testContext()
		f = envtest.NewFixture(ctx, k8sClient)
	})

	// discoverWith lists the node groups with management as the
	// management-cluster client.
	discoverWith := func(management client.Client) nodegroups.List {
		GinkgoHelper()
		provider := NewProvider(Options{
			Management: management,
			Workload:   k8sClient,
			Cluster:    types.NamespacedName{Namespace: f.Namespace, Name: f.Cluster.Name},
			Clock:      clocktesting.NewFakePassiveClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)),
			Owner:      ownUID,
		})
		list, err := provider.NodeGroups(ctx)
		Expect(err).NotTo(HaveOccurred())
		return list
	}
	discover := func() nodegroups.List {
		GinkgoHelper()
		return discoverWith(k8sClient)
	}
	groupIn := func(list nodegroups.List, kind, name string) nodegroups.NodeGroup {
		GinkgoHelper()
		id := scalable.ID(kind, f.Namespace, name)
		for _, group := range list.Groups {
			if group.ID() == id {
				return group
			}
		}
		Fail("no node group " + id)
		return nil
	}
	groupIDs := func(list nodegroups.List) []string {
		var ids []string
		for _, group := range list.Groups {
			ids = append(ids, group.ID())
		}
		return ids
	}
	id := func(kind, name string) string { return scalable.ID(kind, f.Namespace, name) }

	// member creates a Machine of the MachineSet and, when registered, the
	// Node it became, linked by provider ID.
	member := func(ms *clusterv1.MachineSet, name string, registered bool) (*clusterv1.Machine, *corev1.Node) {
		GinkgoHelper()
		machine := f.Machine(name, ms)
		machine.Spec.ProviderID = "test:///" + f.NodeName(name)
		f.Create(ctx, machine)
		if !registered {
			return machine, nil
		}
		node := f.Node(name, machine.Spec.ProviderID)
		f.Create(ctx, node)
		return machine, node
	}
	// markForDeletion marks machine as a scale-down before this one did.
	markForDeletion := func(machine *clusterv1.Machine) {
		GinkgoHelper()
		machine.Annotations = map[string]string{clusterv1.DeleteMachineAnnotation: "2026-11-23T04:00:00Z"}
		Expect(k8sClient.Update(ctx, machine)).To(Succeed())
	}
	markedMachines := func() []string {
		GinkgoHelper()
		machines := &clusterv1.MachineList{}
		Expect(k8sClient.List(ctx, machines, client.InNamespace(f.Namespace))).To(Succeed())
		var marked []string
		for _, machine := range machines.Items {
			if _, ok := machine.Annotations[clusterv1.DeleteMachineAnnotation]; ok {
				marked = append(marked, machine.Name)
			}
		}
		return marked
	}
	replicasOf := func(obj client.Object) int32 {
		GinkgoHelper()
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		switch o := obj.(type) {
		case *clusterv1.MachineDeployment:
			return *o.Spec.Replicas
		case *clusterv1.MachineSet:
			return *o.Spec.Replicas
		}
		Fail("not a scalable resource")
		return 0
	}
	// scalableWithMachineSet creates a node group of the kind and returns it
	// with the MachineSet that owns its Machines.
	scalableWithMachineSet := func(kind string, replicas int32, annotations map[string]string) (client.Object, *clusterv1.MachineSet) {
		GinkgoHelper()
		if kind == scalable.KindMachineSet {
			ms := f.MachineSet("group", replicas, annotations, nil)
			f.Create(ctx, ms)
			return ms, ms
		}
		md := f.MachineDeployment("group", replicas, annotations)
		f.Create(ctx, md)
		ms := f.MachineSet("group-abc", replicas, annotations, md)
		f.Create(ctx, ms)
		return md, ms
	}
	deleteKeepingFinalizer := func(machine *clusterv1.Machine) {
		GinkgoHelper()
		machine.Finalizers = append(machine.Finalizers, keepFinalizer)
		Expect(k8sClient.Update(ctx, machine)).To(Succeed())
		Expect(k8sClient.Delete(ctx, machine)).To(Succeed())
	}

	Describe("discovery", func() {
		It("finds MachineDeployments and standalone MachineSets, not the MachineSets of a MachineDeployment", func() {
			md := f.MachineDeployment("md-0", 2, sizeAnnotations(1, 5))
			plain := f.MachineDeployment("md-plain", 1, nil)
			otherCluster := f.MachineDeployment("md-other", 1, sizeAnnotations(0, 5))
			otherCluster.Spec.ClusterName = "other"
			f.Create(ctx, md, plain, otherCluster)
			// The MachineSet controller copies the MachineDeployment's annotations.
			f.Create(ctx,
				f.MachineSet("md-0-abc", 2, sizeAnnotations(1, 5), md),
				f.MachineSet("ms-0", 0, sizeAnnotations(0, 3), nil),
				f.MachineSet("ms-plain", 1, nil, nil),
			)

			list := discover()
			Expect(groupIDs(list)).To(ConsistOf(id("MachineDeployment", "md-0"), id("MachineSet", "ms-0")))
			Expect(list.Problems).To(BeEmpty())
			group := groupIn(list, "MachineDeployment", "md-0")
			Expect(group.MinSize()).To(Equal(1))
			Expect(group.MaxSize()).To(Equal(5))
			Expect(group.TargetSize()).To(Equal(2))
			Expect(group.ScaleDownBlockedReason()).To(BeEmpty())
		})

		DescribeTable("a wrong annotation disables that group only, saying which annotation is wrong",
			func(annotations map[string]string, wrong string) {
				f.Create(ctx,
					f.MachineDeployment("good", 1, sizeAnnotations(0, 3)),
					f.MachineDeployment("bad", 1, annotations),
				)

				list := discover()
				Expect(groupIDs(list)).To(ConsistOf(id("MachineDeployment", "good")))
				Expect(list.Problems).To(ConsistOf(And(
					HaveField("ID", id("MachineDeployment", "bad")),
					HaveField("Reason", ReasonInvalidAnnotation),
					HaveField("Message", And(ContainSubstring(wrong), ContainSubstring(id("MachineDeployment", "bad")))),
				)))
			},
			Entry("min not an integer", map[string]string{scalable.MinSizeAnnotation: "one", scalable.MaxSizeAnnotation: "3"}, scalable.MinSizeAnnotation),
			Entry("max not an integer", map[string]string{scalable.MaxSizeAnnotation: "3.5"}, scalable.MaxSizeAnnotation),
			Entry("min negative", map[string]string{scalable.MinSizeAnnotation: "-1", scalable.MaxSizeAnnotation: "3"}, scalable.MinSizeAnnotation),
			Entry("max negative", map[string]string{scalable.MaxSizeAnnotation: "-3"}, scalable.MaxSizeAnnotation),
			Entry("min greater than max", map[string]string{scalable.MinSizeAnnotation: "4", scalable.MaxSizeAnnotation: "3"}, scalable.MinSizeAnnotation),
			Entry("max missing", map[string]string{scalable.MinSizeAnnotation: "1"}, scalable.MaxSizeAnnotation),
			Entry("bad utilization threshold", map[string]string{scalable.MaxSizeAnnotation: "3", scalable.ScaleDownUtilizationThresholdAnnotation: "high"}, scalable.ScaleDownUtilizationThresholdAnnotation),
			Entry("bad unneeded time", map[string]string{scalable.MaxSizeAnnotation: "3", scalable.ScaleDownUnneededTimeAnnotation: "10"}, scalable.ScaleDownUnneededTimeAnnotation),
			Entry("bad unready time", map[string]string{scalable.MaxSizeAnnotation: "3", scalable.ScaleDownUnreadyTimeAnnotation: "-1m"}, scalable.ScaleDownUnreadyTimeAnnotation),
			Entry("bad max node provision time", map[string]string{scalable.MaxSizeAnnotation: "3", scalable.MaxNodeProvisionTimeAnnotation: "forever"}, scalable.MaxNodeProvisionTimeAnnotation),
			Entry("max node provision time under the minimum", map[string]string{scalable.MaxSizeAnnotation: "3", scalable.MaxNodeProvisionTimeAnnotation: "30s"}, "under the minimum"),
		)

		DescribeTable("a wrong capacity annotation is a problem of a group that keeps scaling with its nodes",
			func(annotation, value string) {
				annotations := sizeAnnotations(0, 3)
				annotations[annotation] = value
				bad := f.MachineSet("bad", 1, annotations, nil)
				f.Create(ctx, f.MachineDeployment("good", 0, sizeAnnotations(0, 3)), bad)
				machine := f.Machine("a", bad)
				// Nodes outlive the test's namespace: the provider ID is unique.
				machine.Spec.ProviderID = "test:///" + f.Namespace + "/a"
				f.Create(ctx, machine, f.Node("a", machine.Spec.ProviderID))

				list := discover()
				Expect(groupIDs(list)).To(ConsistOf(id("MachineDeployment", "good"), id("MachineSet", "bad")))
				Expect(list.Problems).To(ConsistOf(And(
					HaveField("ID", id("MachineSet", "bad")),
					HaveField("Reason", ReasonInvalidAnnotation),
					HaveField("Message", And(ContainSubstring(annotation), ContainSubstring(value), ContainSubstring("cannot scale up from zero"))),
					HaveField("Kept", BeTrue()),
				)))
				// The engine copies the group's node instead (nodefacts.Rules.TemplateNode).
				_, err := groupIn(list, "MachineSet", "bad").TemplateNode(ctx)
				Expect(err).To(MatchError(ContainSubstring(annotation)), "no scale-from-zero template without the hint")
			},
			Entry("cpu not a quantity", template.CPUAnnotation, "abc"),
			Entry("negative memory", template.MemoryAnnotation, "-4Gi"),
			Entry("negative max pods", template.MaxPodsAnnotation, "-1"),
			Entry("gpu count not a quantity", template.GPUCountAnnotation, "two"),
			Entry("label without a value", template.LabelsAnnotation, "pool=gpu,tier"),
			Entry("taint with an unknown effect", template.TaintsAnnotation, "dedicated=ml:NoWay"),
			Entry("dra driver not a DNS subdomain", template.DRADriverAnnotation, "GPU_driver"),
			Entry("dra driver without a gpu count", template.DRADriverAnnotation, "gpu.nvidia.com"),
		)

		It("passes the per-group options on", func() {
			annotations := sizeAnnotations(0, 3)
			annotations[scalable.ScaleDownUtilizationThresholdAnnotation] = "0.3"
			annotations[scalable.MaxNodeProvisionTimeAnnotation] = "20m"
			f.Create(ctx, f.MachineSet("ms-0", 1, annotations, nil))

			options := groupIn(discover(), "MachineSet", "ms-0").Options()
			Expect(options.ScaleDownUtilizationThreshold).To(HaveValue(Equal(0.3)))
			Expect(options.MaxNodeProvisionTime).To(HaveValue(Equal(20 * time.Minute)))
			Expect(options.ScaleDownUnneededTime).To(BeNil())
		})

		It("passes the price annotation on", func() {
			annotations := sizeAnnotations(0, 3)
			annotations[template.PriceAnnotation] = "0.192"
			f.Create(ctx, f.MachineSet("ms-0", 1, annotations, nil), f.MachineDeployment("md-0", 1, sizeAnnotations(0, 3)))

			list := discover()
			Expect(list.Problems).To(BeEmpty())
			Expect(groupIn(list, "MachineSet", "ms-0").Options().Price).To(HaveValue(Equal(pricing.Price(192_000))))
			Expect(groupIn(list, "MachineDeployment", "md-0").Options().Price).To(BeNil(), "priced by the engine")
		})

		It("keeps a group whose price annotation is not a price, priced as without it, and says why", func() {
			annotations := sizeAnnotations(0, 3)
			annotations[template.PriceAnnotation] = "-0.19"
			annotations[scalable.ScaleDownUtilizationThresholdAnnotation] = "0.3"
			f.Create(ctx, f.MachineSet("ms-0", 1, annotations, nil))

			list := discover()
			Expect(groupIDs(list)).To(ConsistOf(id("MachineSet", "ms-0")))
			Expect(list.Problems).To(ConsistOf(And(
				HaveField("ID", id("MachineSet", "ms-0")),
				HaveField("Reason", ReasonInvalidPrice),
				HaveField("Message", And(ContainSubstring(template.PriceAnnotation), ContainSubstring("-0.19"), ContainSubstring("default"))),
				HaveField("Kept", BeTrue()),
			)))
			options := groupIn(list, "MachineSet", "ms-0").Options()
			Expect(options.Price).To(BeNil())
			Expect(options.ScaleDownUtilizationThreshold).To(HaveValue(Equal(0.3)), "the other options hold")
		})

		It("passes the consolidation budget annotation on, and keeps a group whose budget is no budget, with the ClusterAutoscaler's, saying why", func() {
			frozen, bad := sizeAnnotations(0, 3), sizeAnnotations(0, 3)
			frozen[scalable.ConsolidationBudgetAnnotation] = "0"
			bad[scalable.ConsolidationBudgetAnnotation] = "120%"
			f.Create(ctx, f.MachineSet("ms-frozen", 1, frozen, nil), f.MachineSet("ms-bad", 1, bad, nil))

			list := discover()
			Expect(groupIDs(list)).To(ConsistOf(id("MachineSet", "ms-frozen"), id("MachineSet", "ms-bad")))
			Expect(groupIn(list, "MachineSet", "ms-frozen").Options().ConsolidationBudget).To(HaveValue(Equal(intstr.FromInt32(0))))
			Expect(list.Problems).To(ConsistOf(And(
				HaveField("ID", id("MachineSet", "ms-bad")),
				HaveField("Reason", ReasonInvalidConsolidationBudget),
				HaveField("Message", And(ContainSubstring(scalable.ConsolidationBudgetAnnotation), ContainSubstring("120%"), ContainSubstring("ClusterAutoscaler's budget"))),
				HaveField("Kept", BeTrue()),
			)))
			Expect(groupIn(list, "MachineSet", "ms-bad").Options().ConsolidationBudget).To(BeNil())
		})

		It("does not scale the node groups of a paused Cluster", func() {
			f.Cluster.Spec.Paused = ptr.To(true)
			Expect(k8sClient.Update(ctx, f.Cluster)).To(Succeed())
			f.Create(ctx, f.MachineDeployment("md-0", 1, sizeAnnotations(0, 3)), f.MachineSet("ms-0", 1, sizeAnnotations(0, 3), nil))

			list := discover()
			Expect(list.Groups).To(BeEmpty())
			Expect(list.Problems).To(ConsistOf(
				And(HaveField("ID", id("MachineDeployment", "md-0")), HaveField("Reason", ReasonPaused)),
				And(HaveField("ID", id("MachineSet", "ms-0")), HaveField("Reason", ReasonPaused)),
			))
		})

		It("does not scale a paused or deleted resource, and scales the others", func() {
			paused := sizeAnnotations(0, 3)
			paused[clusterv1.PausedAnnotation] = ""
			deleting := f.MachineDeployment("md-deleting", 1, sizeAnnotations(0, 3))
			deleting.Finalizers = []string{keepFinalizer}
			f.Create(ctx, f.MachineDeployment("md-paused", 1, paused), deleting, f.MachineDeployment("md-0", 1, sizeAnnotations(0, 3)))
			Expect(k8sClient.Delete(ctx, deleting)).To(Succeed())

			list := discover()
			Expect(groupIDs(list)).To(ConsistOf(id("MachineDeployment", "md-0")))
			Expect(list.Problems).To(ConsistOf(
				And(HaveField("ID", id("MachineDeployment", "md-paused")), HaveField("Reason", ReasonPaused)),
				And(HaveField("ID", id("MachineDeployment", "md-deleting")), HaveField("Reason", ReasonDeleting)),
			))
		})
	})

	Describe("instances", func() {
		It("maps every Machine to its Node and state", func() {
			owner, ms := scalableWithMachineSet(scalable.KindMachineDeployment, 5, sizeAnnotations(0, 5))

			// The Node writes its provider ID differently from the Machine.
			running := f.Machine("running", ms)
			running.Spec.ProviderID = "test:///zone-a/" + f.NodeName("running")
			f.Create(ctx, running, f.Node("running", "test://zone-a/"+f.NodeName("running")))

			// Only the annotations Cluster API sets on the Node link it.
			annotated := f.Machine("annotated", ms)
			annotatedNode := f.Node("annotated", "")
			annotatedNode.Annotations = map[string]string{
				clusterv1.MachineAnnotation:          "annotated",
				clusterv1.ClusterNamespaceAnnotation: f.Namespace,
			}
			f.Create(ctx, annotated, annotatedNode)

			f.Create(ctx, f.Machine("pending", ms))

			failed := f.Machine("failed", ms)
			failed.Spec.ProviderID = "test:///zone-a/failed"
			//nolint:staticcheck // SA1019: tests the detection of v1beta1 Machine failures.
			failed.Status.Deprecated = &clusterv1.MachineDeprecatedStatus{V1Beta1: &clusterv1.MachineV1Beta1DeprecatedStatus{
				FailureReason:  ptr.To(deprecatederrors.CreateMachineError),
				FailureMessage: ptr.To("out of capacity in zone-a"),
			}}
			f.Create(ctx, failed)

			deleting, _ := member(ms, "deleting", true)
			deleteKeepingFinalizer(deleting)

			// A Node of no Machine of the group.
			f.Create(ctx, f.Node("stranger", "test:///zone-a/stranger"))

			group := groupIn(discover(), "MachineDeployment", owner.GetName())
			Expect(group.TargetSize()).To(Equal(5))
			Expect(group.Instances()).To(ConsistOf(
				And(HaveField("ID", running.Spec.ProviderID), HaveField("NodeName", f.NodeName("running")), HaveField("State", nodegroups.InstanceRunning), HaveField("Error", BeNil())),
				And(HaveField("ID", "clusterapi://"+f.Namespace+"/annotated"), HaveField("NodeName", f.NodeName("annotated")), HaveField("State", nodegroups.InstanceRunning)),
				And(HaveField("ID", "clusterapi://"+f.Namespace+"/pending"), HaveField("NodeName", ""), HaveField("State", nodegroups.InstanceCreating), HaveField("Error", BeNil())),
				And(HaveField("ID", "test:///zone-a/failed"), HaveField("NodeName", ""), HaveField("State", nodegroups.InstanceCreating),
					HaveField("Error", Equal(&nodegroups.InstanceError{Reason: "CreateError", Message: "out of capacity in zone-a"}))),
				And(HaveField("ID", deleting.Spec.ProviderID), HaveField("State", nodegroups.InstanceDeleting)),
			))
			Expect(group.Instances()).To(HaveEach(HaveField("Removable", BeTrue())), "every instance has a Machine to delete")
		})
	})

	Describe("resizing", func() {
		It("raises the target size within max", func() {
			ms := f.MachineSet("ms-0", 1, sizeAnnotations(0, 3), nil)
			f.Create(ctx, ms)
			group := groupIn(discover(), "MachineSet", "ms-0")

			Expect(group.IncreaseSize(ctx, 2)).To(Succeed())
			Expect(replicasOf(ms)).To(BeEquivalentTo(3))
			var outOfBounds *scalable.OutOfBoundsError
			Expect(errors.As(group.IncreaseSize(ctx, 1), &outOfBounds)).To(BeTrue())
			Expect(group.IncreaseSize(ctx, 0)).NotTo(Succeed())
			Expect(replicasOf(ms)).To(BeEquivalentTo(3))
		})

		It("keeps a replicas change another writer makes between its read and its write", func() {
			ms := f.MachineSet("ms-0", 1, sizeAnnotations(0, 10), nil)
			f.Create(ctx, ms)
			watching, err := client.NewWithWatch(testEnv.Config, client.Options{Scheme: testEnv.Scheme})
			Expect(err).NotTo(HaveOccurred())
			raced := false
			racing := interceptor.NewClient(watching, interceptor.Funcs{
				SubResourceUpdate: func(ctx context.Context, c client.Client, subResource string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
					if subResource == "scale" && !raced {
						raced = true
						other := &clusterv1.MachineSet{}
						Expect(c.Get(ctx, client.ObjectKeyFromObject(obj), other)).To(Succeed())
						other.Spec.Replicas = ptr.To(*other.Spec.Replicas + 2)
						Expect(c.Update(ctx, other)).To(Succeed())
					}
					return c.SubResource(subResource).Update(ctx, obj, opts...)
				},
			})
			group := groupIn(discoverWith(racing), "MachineSet", "ms-0")

			Expect(group.IncreaseSize(ctx, 1)).To(Succeed())
			Expect(raced).To(BeTrue())
			Expect(replicasOf(ms)).To(BeEquivalentTo(4), "1 + 2 from the other writer + 1 from us")
		})

		It("does not grow while a removal it asked for is pending, which growing would cancel, and grows once Cluster API deletes the Machine", func() {
			ms := f.MachineSet("ms-0", 2, sizeAnnotations(0, 5), nil)
			f.Create(ctx, ms)
			member(ms, "a", true)
			removed, _ := member(ms, "b", true)
			// What DeleteNodes leaves before Cluster API acts: the Machine
			// marked by the autoscaler, the replicas lowered.
			removed.Annotations = map[string]string{clusterv1.DeleteMachineAnnotation: "2026-12-07T11:00:00Z", scalable.MarkedAnnotation: "2026-12-07T11:00:00Z"}
			Expect(k8sClient.Update(ctx, removed)).To(Succeed())
			ms.Spec.Replicas = ptr.To[int32](1)
			Expect(k8sClient.Update(ctx, ms)).To(Succeed())
			group := groupIn(discover(), "MachineSet", "ms-0")

			var refused *nodegroups.RefusedError
			Expect(errors.As(group.IncreaseSize(ctx, 1), &refused)).To(BeTrue())
			Expect(refused.Reason).To(ContainSubstring("removal of Machine(s) b is pending"))
			Expect(replicasOf(ms)).To(BeEquivalentTo(1), "the removal stands")

			deleteKeepingFinalizer(removed)
			Expect(group.IncreaseSize(ctx, 1)).To(Succeed())
			Expect(replicasOf(ms)).To(BeEquivalentTo(2))
		})

		It("gives up only replicas that have no Machine yet", func() {
			ms := f.MachineSet("ms-0", 4, sizeAnnotations(0, 5), nil)
			f.Create(ctx, ms)
			member(ms, "a", true)
			member(ms, "b", false)
			group := groupIn(discover(), "MachineSet", "ms-0")

			Expect(group.DecreaseTargetSize(ctx, 2)).To(Succeed())
			Expect(replicasOf(ms)).To(BeEquivalentTo(2))
			Expect(group.DecreaseTargetSize(ctx, 1)).To(MatchError(ContainSubstring("2 instances exist")))
			Expect(replicasOf(ms)).To(BeEquivalentTo(2))
			Expect(markedMachines()).To(BeEmpty())
		})
	})

	Describe("releasing deletion marks", func() {
		// markedBy marks machine as the autoscaler did for the
		// ClusterAutoscaler of uid; "" as a version before marks named one.
		markedBy := func(machine *clusterv1.Machine, uid types.UID) {
			GinkgoHelper()
			value := "2026-11-23T04:00:00Z"
			if uid != "" {
				value = ownership.Stamp(uid, value)
			}
			machine.Annotations = map[string]string{clusterv1.DeleteMachineAnnotation: "2026-11-23T04:00:00Z", scalable.MarkedAnnotation: value}
			Expect(k8sClient.Update(ctx, machine)).To(Succeed())
		}
		ourMark := func(machine *clusterv1.Machine) { GinkgoHelper(); markedBy(machine, ownUID) }
		release := func() error {
			return ReleaseDeletionMarks(ctx, MarkReleaseOptions{Client: k8sClient, Cluster: types.NamespacedName{Namespace: f.Namespace, Name: f.Cluster.Name},
				Owner: ownership.Owner{UID: ownUID, ClusterAutoscalers: clusterAutoscalers{anotherUID: {Namespace: f.Namespace, Name: "another"}}}})
		}

		It("removes only its own marks, and keeps those of scale-downs under way", func() {
			steady := f.MachineSet("steady", 2, sizeAnnotations(0, 5), nil)
			shrinking := f.MachineSet("shrinking", 1, sizeAnnotations(0, 5), nil)
			f.Create(ctx, steady, shrinking)
			interrupted, _ := member(steady, "interrupted", true)
			operators, _ := member(steady, "operators", true)
			going, _ := member(shrinking, "going", true)
			member(shrinking, "staying", true)
			ourMark(interrupted)
			markForDeletion(operators)
			ourMark(going)

			Expect(release()).To(Succeed())

			Expect(markedMachines()).To(ConsistOf("operators", "going"), "an operator's mark and a scale-down under way stay")
		})

		// What a previous version marked is the current owner's, so that an
		// upgrade loses nothing; so is what a ClusterAutoscaler that no
		// longer exists marked (deleted and created again, moved with
		// clusterctl): nobody else will ever release it. The marks of
		// another ClusterAutoscaler that exists are its engine's.
		It("removes the marks of its ClusterAutoscaler, of versions before and of ClusterAutoscalers gone, never another's", func() {
			ms := f.MachineSet("ms-0", 4, sizeAnnotations(0, 5), nil)
			f.Create(ctx, ms)
			own, _ := member(ms, "own", true)
			legacy, _ := member(ms, "legacy", true)
			orphaned, _ := member(ms, "orphaned", true)
			anothers, _ := member(ms, "anothers", true)
			markedBy(own, ownUID)
			markedBy(legacy, "")
			markedBy(orphaned, "c0ffee00-0000-4000-8000-00000000dead")
			markedBy(anothers, anotherUID)

			Expect(release()).To(Succeed())

			Expect(markedMachines()).To(ConsistOf("anothers"))
		})

		It("gives back a node handed over by removing its own mark only", func() {
			ms := f.MachineSet("ms-0", 2, sizeAnnotations(0, 5), nil)
			f.Create(ctx, ms)
			kept, keptNode := member(ms, "kept", true)
			operators, operatorsNode := member(ms, "operators", true)
			ourMark(kept)
			markForDeletion(operators)
			group := groupIn(discover(), "MachineSet", "ms-0")

			Expect(group.CancelDeletion(ctx, []*corev1.Node{keptNode, operatorsNode})).To(Succeed())

			Expect(markedMachines()).To(ConsistOf("operators"))
		})

		It("gives back a node handed over by removing its own mark, or one of a version before, never another's", func() {
			ms := f.MachineSet("ms-0", 2, sizeAnnotations(0, 5), nil)
			f.Create(ctx, ms)
			legacy, legacyNode := member(ms, "legacy", true)
			anothers, anothersNode := member(ms, "anothers", true)
			markedBy(legacy, "")
			markedBy(anothers, anotherUID)
			group := groupIn(discover(), "MachineSet", "ms-0")

			Expect(group.CancelDeletion(ctx, []*corev1.Node{legacyNode, anothersNode})).To(Succeed())

			Expect(markedMachines()).To(ConsistOf("anothers"))
		})
	})

	Describe("deleting nodes", func() {
		DescribeTable("marks exactly the Machines of the given nodes and lowers the replicas once for the batch",
			func(kind string) {
				owner, ms := scalableWithMachineSet(kind, 4, sizeAnnotations(1, 5))
				_, a := member(ms, "a", true)
				member(ms, "b", true)
				_, c := member(ms, "c", true)
				member(ms, "d", true)
				group := groupIn(discover(), kind, owner.GetName())

				Expect(group.DeleteNodes(ctx, []*corev1.Node{a, c})).To(Succeed())
				Expect(markedMachines()).To(ConsistOf("a", "c"))
				Expect(replicasOf(owner)).To(BeEquivalentTo(2))
			},
			Entry("MachineDeployment", scalable.KindMachineDeployment),
			Entry("MachineSet", scalable.KindMachineSet),
		)

		// Between the marks and the write of the replicas, the sweep of a
		// new engine (after a hand-over of the Cluster's Lease) may remove
		// a mark, or another ClusterAutoscaler's engine take the Machine:
		// lowering the replicas then has Cluster API choose which Machine
		// goes. The marks are read again at the write.
		DescribeTable("refuses when a mark it placed is gone or another's at the write of the replicas",
			func(change func(machine *clusterv1.Machine), marked []string) {
				ms := f.MachineSet("ms-0", 3, sizeAnnotations(0, 5), nil)
				f.Create(ctx, ms)
				member(ms, "a", true)
				_, b := member(ms, "b", true)
				member(ms, "c", true)
				changed := false
				watching, err := client.NewWithWatch(testEnv.Config, client.Options{Scheme: testEnv.Scheme})
				Expect(err).NotTo(HaveOccurred())
				racing := interceptor.NewClient(watching, interceptor.Funcs{
					Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
						if err := c.Patch(ctx, obj, patch, opts...); err != nil {
							return err
						}
						if machine, ok := obj.(*clusterv1.Machine); ok && !changed && scalable.IsMarkedByAutoscaler(machine) {
							changed = true
							fresh := &clusterv1.Machine{}
							Expect(c.Get(ctx, client.ObjectKeyFromObject(machine), fresh)).To(Succeed())
							change(fresh)
							Expect(c.Update(ctx, fresh)).To(Succeed())
						}
						return nil
					},
				})
				group := groupIn(discoverWith(racing), "MachineSet", "ms-0")

				expectRefused(group.DeleteNodes(ctx, []*corev1.Node{b}), "Machine b")
				Expect(changed).To(BeTrue())
				Expect(replicasOf(ms)).To(BeEquivalentTo(3), "Cluster API would have chosen which Machine goes")
				Expect(markedMachines()).To(ConsistOf(marked))
			},
			Entry("removed by a sweep", func(machine *clusterv1.Machine) {
				delete(machine.Annotations, clusterv1.DeleteMachineAnnotation)
				delete(machine.Annotations, scalable.MarkedAnnotation)
			}, []string{}),
			Entry("taken by another ClusterAutoscaler, whose mark stays", func(machine *clusterv1.Machine) {
				machine.Annotations[scalable.MarkedAnnotation] = ownership.Stamp(anotherUID, "2026-12-06T18:00:00Z")
			}, []string{"b"}),
		)

		It("never goes below min size", func() {
			ms := f.MachineSet("ms-0", 3, sizeAnnotations(2, 5), nil)
			f.Create(ctx, ms)
			_, a := member(ms, "a", true)
			_, b := member(ms, "b", true)
			member(ms, "c", true)
			group := groupIn(discover(), "MachineSet", "ms-0")

			err := group.DeleteNodes(ctx, []*corev1.Node{a, b})
			expectRefused(err, "outside the bounds [2, 5]")
			var outOfBounds *scalable.OutOfBoundsError
			Expect(errors.As(err, &outOfBounds)).To(BeTrue(), "got %v", err)
			Expect(markedMachines()).To(BeEmpty(), "the marks must be removed again")
			Expect(replicasOf(ms)).To(BeEquivalentTo(3))
		})

		It("refuses nodes of another group and touches nothing", func() {
			ms := f.MachineSet("ms-0", 2, sizeAnnotations(0, 5), nil)
			other := f.MachineSet("ms-1", 1, sizeAnnotations(0, 5), nil)
			f.Create(ctx, ms, other)
			_, a := member(ms, "a", true)
			member(ms, "b", true)
			_, stranger := member(other, "x", true)
			group := groupIn(discover(), "MachineSet", "ms-0")

			Expect(group.DeleteNodes(ctx, []*corev1.Node{a, stranger})).To(MatchError(ContainSubstring("does not belong")))
			Expect(markedMachines()).To(BeEmpty())
			Expect(replicasOf(ms)).To(BeEquivalentTo(2))
			Expect(replicasOf(other)).To(BeEquivalentTo(1))
		})

		It("skips Machines already being deleted", func() {
			// A previous scale-down already lowered the replicas for b.
			ms := f.MachineSet("ms-0", 2, sizeAnnotations(0, 5), nil)
			f.Create(ctx, ms)
			member(ms, "a", true)
			b, bNode := member(ms, "b", true)
			_, c := member(ms, "c", true)
			deleteKeepingFinalizer(b)
			group := groupIn(discover(), "MachineSet", "ms-0")

			Expect(group.DeleteNodes(ctx, []*corev1.Node{bNode, c})).To(Succeed())
			Expect(markedMachines()).To(ConsistOf("c"))
			Expect(replicasOf(ms)).To(BeEquivalentTo(1))
		})

		DescribeTable("lowers the replicas for an already marked Machine only when they do not cover it yet",
			func(replicas int) {
				ms := f.MachineSet("ms-0", int32(replicas), sizeAnnotations(0, 5), nil)
				f.Create(ctx, ms)
				member(ms, "a", true)
				b, bNode := member(ms, "b", true)
				markForDeletion(b)
				member(ms, "c", true)
				group := groupIn(discover(), "MachineSet", "ms-0")

				Expect(group.DeleteNodes(ctx, []*corev1.Node{bNode})).To(Succeed())
				Expect(replicasOf(ms)).To(BeEquivalentTo(2), "lowering again would remove a, or c, which nobody chose")
				Expect(markedMachines()).To(ConsistOf("b"))
			},
			// A scale-down marked b and lowered the replicas from 3 to 2;
			// the MachineSet controller has not started deleting b yet.
			Entry("already lowered for it", 2),
			// The manager stopped between the mark and the lowering: the
			// mark alone removes nothing.
			Entry("mark outlived an interrupted scale-down", 3),
		)

		It("refuses while Cluster API could remove other Machines than the marked ones", func() {
			ms := f.MachineSet("ms-0", 3, sizeAnnotations(0, 5), nil)
			f.Create(ctx, ms)
			stale, _ := member(ms, "a", true)
			markForDeletion(stale)
			member(ms, "b", true)
			_, c := member(ms, "c", true)
			group := groupIn(discover(), "MachineSet", "ms-0")

			expectRefused(group.DeleteNodes(ctx, []*corev1.Node{c}), "might not remove the requested ones")
			Expect(markedMachines()).To(ConsistOf("a"), "only the mark that was there before")
			Expect(replicasOf(ms)).To(BeEquivalentTo(3))
		})

		It("refuses while a Machine is being replaced, which lowering the replicas would only cancel", func() {
			ms := f.MachineSet("ms-0", 3, sizeAnnotations(0, 5), nil)
			f.Create(ctx, ms)
			a, _ := member(ms, "a", true)
			member(ms, "b", true)
			_, c := member(ms, "c", true)
			deleteKeepingFinalizer(a)
			group := groupIn(discover(), "MachineSet", "ms-0")

			expectRefused(group.DeleteNodes(ctx, []*corev1.Node{c}), "2 Machines exist besides those being deleted")
			Expect(markedMachines()).To(BeEmpty())
			Expect(replicasOf(ms)).To(BeEquivalentTo(3))
		})

		It("removes the marks again when lowering the replicas fails", func() {
			ms := f.MachineSet("ms-0", 2, sizeAnnotations(0, 5), nil)
			f.Create(ctx, ms)
			_, a := member(ms, "a", true)
			member(ms, "b", true)
			watching, err := client.NewWithWatch(testEnv.Config, client.Options{Scheme: testEnv.Scheme})
			Expect(err).NotTo(HaveOccurred())
			failing := interceptor.NewClient(watching, interceptor.Funcs{
				SubResourceUpdate: func(ctx context.Context, c client.Client, subResource string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
					if subResource == "scale" {
						// Seen by the test, the Machine is marked at this point.
						Expect(markedMachines()).To(ConsistOf("a"))
						return errors.New("the API server is unhappy")
					}
					return c.SubResource(subResource).Update(ctx, obj, opts...)
				},
			})
			group := groupIn(discoverWith(failing), "MachineSet", "ms-0")

			Expect(group.DeleteNodes(ctx, []*corev1.Node{a})).To(MatchError(ContainSubstring("the API server is unhappy")))
			Expect(markedMachines()).To(BeEmpty())
			Expect(replicasOf(ms)).To(BeEquivalentTo(2))
		})

		It("refuses, when asked again, what changed since the group was read", func() {
			md := f.MachineDeployment("md-0", 2, sizeAnnotations(0, 5))
			f.Create(ctx, md)
			ms := f.MachineSet("md-0-a", 2, nil, md)
			f.Create(ctx, ms)
			member(ms, "a", true)
			_, node := member(ms, "b", true)
			group := groupIn(discover(), "MachineDeployment", "md-0")
			Expect(group.CheckScaleDown(ctx, 1)).To(Succeed())

			Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(md), md)).To(Succeed())
			md.Annotations[clusterv1.PausedAnnotation] = ""
			Expect(k8sClient.Update(ctx, md)).To(Succeed())

			expectRefused(group.CheckScaleDown(ctx, 1), "paused")
			expectRefused(group.DeleteNodes(ctx, []*corev1.Node{node}), "paused")
			Expect(markedMachines()).To(BeEmpty())
			Expect(replicasOf(md)).To(BeEquivalentTo(2))
		})

		It("refuses during a rollout", func() {
			md := f.MachineDeployment("md-0", 2, sizeAnnotations(0, 5))
			f.Create(ctx, md)
			oldMS, newMS := f.MachineSet("md-0-old", 1, nil, md), f.MachineSet("md-0-new", 1, nil, md)
			f.Create(ctx, oldMS, newMS)
			member(oldMS, "old", true)
			_, node := member(newMS, "new", true)
			group := groupIn(discover(), "MachineDeployment", "md-0")

			Expect(group.ScaleDownBlockedReason()).To(ContainSubstring("rolling out"))
			expectRefused(group.DeleteNodes(ctx, []*corev1.Node{node}), "rolling out")
			Expect(markedMachines()).To(BeEmpty())
			Expect(replicasOf(md)).To(BeEquivalentTo(2))
		})
	})

	Describe("deleting instances", func() {
		It("removes a failed Machine that has no node, and refuses one that has", func() {
			ms := f.MachineSet("ms-0", 3, sizeAnnotations(0, 5), nil)
			f.Create(ctx, ms)
			member(ms, "a", true)
			member(ms, "b", true)
			failed := f.Machine("failed", ms)
			failed.Status.Phase = string(clusterv1.MachinePhaseFailed) //nolint:staticcheck // SA1019: tests the removal of v1beta1 failed Machines.
			f.Create(ctx, failed)
			group := groupIn(discover(), "MachineSet", "ms-0")

			var failedInstance, registered nodegroups.Instance
			for _, instance := range group.Instances() {
				switch {
				case instance.Error != nil:
					failedInstance = instance
				case instance.NodeName == f.NodeName("a"):
					registered = instance
				}
			}
			Expect(failedInstance.Error).To(HaveField("Reason", "MachineFailed"))

			Expect(group.DeleteInstances(ctx, []nodegroups.Instance{registered})).To(MatchError(ContainSubstring("must be deleted as a node")))
			Expect(markedMachines()).To(BeEmpty())

			Expect(group.DeleteInstances(ctx, []nodegroups.Instance{failedInstance})).To(Succeed())
			Expect(markedMachines()).To(ConsistOf("failed"))
			Expect(replicasOf(ms)).To(BeEquivalentTo(2))
		})
	})

	Describe("template nodes", func() {
		It("scales from zero with capacity annotations", func() {
			annotations := sizeAnnotations(0, 5)
			annotations[template.CPUAnnotation] = "2"
			annotations[template.MemoryAnnotation] = "4Gi"
			f.Create(ctx, f.MachineDeployment("md-0", 0, annotations))

			templateNode, err := groupIn(discover(), "MachineDeployment", "md-0").TemplateNode(ctx)
			Expect(err).NotTo(HaveOccurred())
			Expect(templateNode.Status.Capacity).To(HaveKeyWithValue(corev1.ResourceMemory, BeComparableTo(resource.MustParse("4Gi"))))
		})

		It("says why a group with no nodes and no capacity cannot scale from zero", func() {
			f.Create(ctx, f.MachineDeployment("md-0", 0, sizeAnnotations(0, 5)))

			_, err := groupIn(discover(), "MachineDeployment", "md-0").TemplateNode(ctx)
			var cannot *template.CannotScaleFromZeroError
			Expect(errors.As(err, &cannot)).To(BeTrue(), "got %v", err)
			Expect(cannot.ID).To(Equal(id("MachineDeployment", "md-0")))
			var readErr *nodegroups.ReadError
			Expect(errors.As(err, &readErr)).To(BeFalse(), "an answer, not a problem of the group")
		})
	})
})

// expectRefused expects err to be the group's refusal, a
// *nodegroups.RefusedError, saying reason: a removal that no longer holds,
// not a failure.
func expectRefused(err error, reason string) {
	GinkgoHelper()
	var refused *nodegroups.RefusedError
	Expect(errors.As(err, &refused)).To(BeTrue(), "not a refusal: %v", err)
	Expect(refused.Reason).To(ContainSubstring(reason))
}
