package scalable

import (
	"context"
	"errors"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/envtest"
)

func sizeAnnotations(minSize, maxSize int) map[string]string {
	return map[string]string{MinSizeAnnotation: strconv.Itoa(minSize), MaxSizeAnnotation: strconv.Itoa(maxSize)}
}

var _ = Describe("Resource", func() {
	var (
		ctx   context.Context
		f     *envtest.Fixture
		clock *clocktesting.FakePassiveClock
	)

	BeforeEach(func() {
		ctx = testContext()
		f = envtest.NewFixture(ctx, k8sClient)
		clock = clocktesting.NewFakePassiveClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	})

	newResource := func(obj client.Object) Resource {
		GinkgoHelper()
		r, err := New(obj, Options{Client: k8sClient, Cluster: f.Cluster, Clock: clock, Writes: NewWrites(), Owner: ownUID})
		Expect(err).NotTo(HaveOccurred())
		return r
	}

	// specReplicas reads spec.replicas straight from the object.
	specReplicas := func(obj client.Object) int32 {
		GinkgoHelper()
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		switch o := obj.(type) {
		case *clusterv1.MachineDeployment:
			return ptr.Deref(o.Spec.Replicas, -1)
		case *clusterv1.MachineSet:
			return ptr.Deref(o.Spec.Replicas, -1)
		case *clusterv1.MachinePool:
			return ptr.Deref(o.Spec.Replicas, -1)
		}
		Fail("not a scalable resource")
		return -1
	}

	// newOfKind builds a scalable resource of the kind, not yet created.
	newOfKind := func(kind, name string, replicas int32, annotations map[string]string) client.Object {
		GinkgoHelper()
		switch kind {
		case KindMachineDeployment:
			return f.MachineDeployment(name, replicas, annotations)
		case KindMachineSet:
			return f.MachineSet(name, replicas, annotations, nil)
		case KindMachinePool:
			return f.MachinePool(name, replicas, annotations)
		}
		Fail("unknown kind " + kind)
		return nil
	}

	Describe("a MachineDeployment", func() {
		It("describes itself from its spec and annotations", func() {
			md := f.MachineDeployment("md-0", 2, map[string]string{
				MinSizeAnnotation:               "1",
				MaxSizeAnnotation:               "5",
				ScaleDownUnneededTimeAnnotation: "3m",
			})
			md.Spec.Template.Spec.FailureDomain = "zone-a"
			md.Spec.Template.Labels["node-role.kubernetes.io/worker"] = ""
			f.Create(ctx, md)

			r := newResource(md)
			Expect(r.ID()).To(Equal("MachineDeployment/" + f.Namespace + "/md-0"))
			Expect(r.Kind()).To(Equal(KindMachineDeployment))
			Expect(r.ClusterName()).To(Equal(f.Cluster.Name))
			Expect(r.MinSize()).To(Equal(1))
			Expect(r.MaxSize()).To(Equal(5))
			Expect(r.Replicas()).To(Equal(2))
			Expect(r.Options().ScaleDownUnneededTime).To(HaveValue(Equal(3 * time.Minute)))
			Expect(r.MachineTemplate().Spec.FailureDomain).To(Equal("zone-a"))
			Expect(r.MachineTemplate().Labels).To(HaveKey("node-role.kubernetes.io/worker"))
			Expect(r.MachineTemplate().Spec.InfrastructureRef.Kind).To(Equal(envtest.InfrastructureMachineTemplate.Kind))
			Expect(r.Paused()).To(BeFalse())
			Expect(r.Deleting()).To(BeFalse())
		})

		It("owns the Machines of its MachineSets only", func() {
			md := f.MachineDeployment("md-0", 3, sizeAnnotations(0, 5))
			other := f.MachineDeployment("md-1", 1, sizeAnnotations(0, 5))
			f.Create(ctx, md, other)
			msOld := f.MachineSet("md-0-old", 1, nil, md)
			msNew := f.MachineSet("md-0-new", 2, nil, md)
			msOther := f.MachineSet("md-1-abc", 1, nil, other)
			f.Create(ctx, msOld, msNew, msOther)
			f.Create(ctx,
				f.Machine("md-0-old-a", msOld),
				f.Machine("md-0-new-a", msNew),
				f.Machine("md-0-new-b", msNew),
				f.Machine("md-1-abc-a", msOther),
			)
			// A Machine that matches the selector but no MachineSet of the
			// MachineDeployment controls is not its Machine.
			orphan := f.Machine("md-0-orphan", msNew)
			orphan.OwnerReferences = nil
			f.Create(ctx, orphan)

			machines, err := newResource(md).Machines(ctx)
			Expect(err).NotTo(HaveOccurred())
			Expect(names(machines)).To(ConsistOf("md-0-old-a", "md-0-new-a", "md-0-new-b"))
		})

		It("reports a rollout while two MachineSets have replicas", func() {
			md := f.MachineDeployment("md-0", 3, sizeAnnotations(0, 5))
			f.Create(ctx, md)
			f.Create(ctx, f.MachineSet("md-0-old", 1, nil, md), f.MachineSet("md-0-new", 2, nil, md))

			reason, err := newResource(md).RolloutReason(ctx)
			Expect(err).NotTo(HaveOccurred())
			Expect(reason).To(ContainSubstring("2 active MachineSets"))
		})

		It("reports no rollout with one active MachineSet", func() {
			md := f.MachineDeployment("md-0", 3, sizeAnnotations(0, 5))
			f.Create(ctx, md)
			f.Create(ctx, f.MachineSet("md-0-old", 0, nil, md), f.MachineSet("md-0-new", 3, nil, md))

			Expect(newResource(md).RolloutReason(ctx)).To(BeEmpty())
		})
	})

	Describe("a MachineSet", func() {
		It("owns the Machines it controls", func() {
			ms := f.MachineSet("ms-0", 2, sizeAnnotations(0, 5), nil)
			other := f.MachineSet("ms-1", 1, nil, nil)
			f.Create(ctx, ms, other)
			f.Create(ctx, f.Machine("ms-0-a", ms), f.Machine("ms-0-b", ms), f.Machine("ms-1-a", other))

			r := newResource(ms)
			Expect(r.ID()).To(Equal("MachineSet/" + f.Namespace + "/ms-0"))
			machines, err := r.Machines(ctx)
			Expect(err).NotTo(HaveOccurred())
			Expect(names(machines)).To(ConsistOf("ms-0-a", "ms-0-b"))
			Expect(r.RolloutReason(ctx)).To(BeEmpty())
		})

		It("is standalone unless a MachineDeployment controls it", func() {
			md := f.MachineDeployment("md-0", 1, nil)
			f.Create(ctx, md)
			Expect(IsStandalone(f.MachineSet("ms-0", 1, nil, nil))).To(BeTrue())
			Expect(IsStandalone(f.MachineSet("md-0-abc", 1, nil, md))).To(BeFalse())
		})
	})

	Describe("a MachinePool", func() {
		It("describes itself from its spec and annotations", func() {
			mp := f.MachinePool("mp-0", 2, map[string]string{
				MinSizeAnnotation:                       "1",
				MaxSizeAnnotation:                       "6",
				ScaleDownUtilizationThresholdAnnotation: "0.3",
			})
			mp.Spec.Template.Labels["node-role.kubernetes.io/worker"] = ""
			f.Create(ctx, mp)

			r := newResource(mp)
			Expect(r.ID()).To(Equal("MachinePool/" + f.Namespace + "/mp-0"))
			Expect(r.Kind()).To(Equal(KindMachinePool))
			Expect(r.ClusterName()).To(Equal(f.Cluster.Name))
			Expect(r.MinSize()).To(Equal(1))
			Expect(r.MaxSize()).To(Equal(6))
			Expect(r.Replicas()).To(Equal(2))
			Expect(r.Options().ScaleDownUtilizationThreshold).To(HaveValue(Equal(0.3)))
			Expect(r.MachineTemplate().Labels).To(HaveKey("node-role.kubernetes.io/worker"))
			Expect(r.MachineTemplate().Spec.InfrastructureRef.Kind).To(Equal(envtest.InfrastructureMachinePool.Kind))
			Expect(r.RolloutReason(ctx)).To(BeEmpty())
		})

		It("owns the MachinePool Machines it controls", func() {
			mp := f.MachinePool("mp-0", 2, sizeAnnotations(0, 5))
			other := f.MachinePool("mp-1", 1, sizeAnnotations(0, 5))
			f.Create(ctx, mp, other)
			f.Create(ctx, f.PoolMachine("mp-0-a", mp), f.PoolMachine("mp-0-b", mp), f.PoolMachine("mp-1-a", other))
			// A Machine with the pool's labels that the pool does not control
			// is not its Machine.
			orphan := f.PoolMachine("mp-0-orphan", mp)
			orphan.OwnerReferences = nil
			f.Create(ctx, orphan)

			machines, err := newResource(mp).Machines(ctx)
			Expect(err).NotTo(HaveOccurred())
			Expect(names(machines)).To(ConsistOf("mp-0-a", "mp-0-b"))
		})

		It("reads the provider IDs of its instances afresh", func() {
			mp := f.MachinePool("mp-0", 2, sizeAnnotations(0, 5))
			f.Create(ctx, mp)
			r := newResource(mp)
			Expect(r.ProviderIDs(ctx)).To(BeEmpty())

			// The MachinePool controller copies them from the infrastructure.
			mp.Spec.ProviderIDList = []string{"test:///a", "test:///b"}
			Expect(k8sClient.Update(ctx, mp)).To(Succeed())
			Expect(r.ProviderIDs(ctx)).To(Equal([]string{"test:///a", "test:///b"}))
		})

		It("leaves provider IDs to the Machines of the other kinds", func() {
			md := f.MachineDeployment("md-0", 1, sizeAnnotations(0, 5))
			f.Create(ctx, md)
			Expect(newResource(md).ProviderIDs(ctx)).To(BeNil())
		})
	})

	DescribeTable("replicas are written through /scale",
		func(kind string) {
			obj := newOfKind(kind, "group", 2, sizeAnnotations(1, 4))
			f.Create(ctx, obj)
			r := newResource(obj)

			By("raising within max")
			Expect(r.UpdateReplicas(ctx, func(current int) (int, error) { return current + 2, nil })).To(Equal(4))
			Expect(specReplicas(obj)).To(BeEquivalentTo(4))

			By("refusing to go above max")
			_, err := r.UpdateReplicas(ctx, func(current int) (int, error) { return current + 1, nil })
			var outOfBounds *OutOfBoundsError
			Expect(errors.As(err, &outOfBounds)).To(BeTrue(), "got %v", err)
			Expect(specReplicas(obj)).To(BeEquivalentTo(4))

			By("lowering within min")
			Expect(r.UpdateReplicas(ctx, func(current int) (int, error) { return current - 3, nil })).To(Equal(1))

			By("refusing to go below min")
			_, err = r.UpdateReplicas(ctx, func(current int) (int, error) { return current - 1, nil })
			Expect(errors.As(err, &outOfBounds)).To(BeTrue(), "got %v", err)
			Expect(specReplicas(obj)).To(BeEquivalentTo(1))
		},
		Entry("MachineDeployment", KindMachineDeployment),
		Entry("MachineSet", KindMachineSet),
		Entry("MachinePool", KindMachinePool),
	)

	It("lets a resource above max move down towards its bounds", func() {
		md := f.MachineDeployment("md-0", 6, sizeAnnotations(1, 4))
		f.Create(ctx, md)
		Expect(newResource(md).UpdateReplicas(ctx, func(current int) (int, error) { return current - 1, nil })).To(Equal(5))
	})

	DescribeTable("does not lose a replicas change made by another writer between its read and its write",
		func(kind string) {
			obj := newOfKind(kind, "group", 2, sizeAnnotations(0, 10))
			f.Create(ctx, obj)
			r := newResource(obj)

			var seen []int
			written, err := r.UpdateReplicas(ctx, func(current int) (int, error) {
				seen = append(seen, current)
				if len(seen) == 1 {
					// Another writer adds 3 after our read.
					behindTheBack := newOfKind(kind, "group", 0, nil)
					Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), behindTheBack)).To(Succeed())
					scale := &autoscalingv1.Scale{}
					Expect(k8sClient.SubResource("scale").Get(ctx, behindTheBack, scale)).To(Succeed())
					scale.Spec.Replicas += 3
					Expect(k8sClient.SubResource("scale").Update(ctx, behindTheBack, client.WithSubResourceBody(scale))).To(Succeed())
				}
				return current + 1, nil
			})
			Expect(err).NotTo(HaveOccurred())
			Expect(seen).To(Equal([]int{2, 5}), "the write must be retried from a fresh read")
			Expect(written).To(Equal(6))
			Expect(specReplicas(obj)).To(BeEquivalentTo(6), "both changes must be kept")
		},
		Entry("MachineDeployment", KindMachineDeployment),
		Entry("MachinePool", KindMachinePool),
	)

	It("gives up on an error from the change", func() {
		md := f.MachineDeployment("md-0", 2, sizeAnnotations(0, 10))
		f.Create(ctx, md)
		refused := errors.New("refused")
		_, err := newResource(md).UpdateReplicas(ctx, func(int) (int, error) { return 0, refused })
		Expect(err).To(MatchError(refused))
		Expect(specReplicas(md)).To(BeEquivalentTo(2))
	})

	It("reports a write of replicas cut by the end of its context as failed, not as done", func() {
		md := f.MachineDeployment("md-0", 2, sizeAnnotations(0, 10))
		f.Create(ctx, md)
		// As the loop's deadline passing between the read and the write.
		writeCtx, cut := context.WithCancel(ctx)
		written, err := newResource(md).UpdateReplicas(writeCtx, func(current int) (int, error) {
			cut()
			return current + 1, nil
		})
		Expect(err).To(MatchError(context.Canceled), "written %d", written)
		Expect(specReplicas(md)).To(BeEquivalentTo(2))
	})

	Describe("pausing and deletion", func() {
		expectNotScalable := func(r Resource, obj client.Object) {
			GinkgoHelper()
			_, err := r.UpdateReplicas(ctx, func(current int) (int, error) { return current + 1, nil })
			var notScalable *NotScalableError
			Expect(errors.As(err, &notScalable)).To(BeTrue(), "got %v", err)
			Expect(specReplicas(obj)).To(BeEquivalentTo(1))
		}

		It("does not scale the resources of a paused Cluster", func() {
			f.Cluster.Spec.Paused = ptr.To(true)
			Expect(k8sClient.Update(ctx, f.Cluster)).To(Succeed())
			md := f.MachineDeployment("md-0", 1, sizeAnnotations(0, 5))
			f.Create(ctx, md)

			r := newResource(md)
			Expect(r.Paused()).To(BeTrue())
			expectNotScalable(r, md)
		})

		It("does not scale a resource with the paused annotation", func() {
			annotations := sizeAnnotations(0, 5)
			annotations[clusterv1.PausedAnnotation] = ""
			ms := f.MachineSet("ms-0", 1, annotations, nil)
			f.Create(ctx, ms)

			r := newResource(ms)
			Expect(r.Paused()).To(BeTrue())
			expectNotScalable(r, ms)
		})

		It("does not scale a resource being deleted", func() {
			md := f.MachineDeployment("md-0", 1, sizeAnnotations(0, 5))
			md.Finalizers = []string{"test.capi-autoscaler.io/keep"}
			f.Create(ctx, md)
			Expect(k8sClient.Delete(ctx, md)).To(Succeed())
			Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(md), md)).To(Succeed())

			r := newResource(md)
			Expect(r.Deleting()).To(BeTrue())
			expectNotScalable(r, md)

			md.Finalizers = nil
			Expect(k8sClient.Update(ctx, md)).To(Succeed())
		})
	})

	It("marks and unmarks a Machine for deletion", func() {
		ms := f.MachineSet("ms-0", 2, sizeAnnotations(0, 5), nil)
		f.Create(ctx, ms)
		machine := f.Machine("ms-0-a", ms)
		untouched := f.Machine("ms-0-b", ms)
		f.Create(ctx, machine, untouched)
		r := newResource(ms)

		Expect(r.MarkMachineForDeletion(ctx, machine)).To(Succeed())
		stored := &clusterv1.Machine{}
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(machine), stored)).To(Succeed())
		Expect(stored.Annotations).To(HaveKeyWithValue(clusterv1.DeleteMachineAnnotation, "2026-01-02T03:04:05Z"))
		Expect(stored.Annotations).To(HaveKeyWithValue(MarkedAnnotation, string(ownUID)+"/2026-01-02T03:04:05Z"), "the mark names its ClusterAutoscaler")
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(untouched), stored)).To(Succeed())
		Expect(stored.Annotations).NotTo(HaveKey(clusterv1.DeleteMachineAnnotation))

		Expect(r.UnmarkMachineForDeletion(ctx, machine)).To(Succeed())
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(machine), stored)).To(Succeed())
		Expect(stored.Annotations).NotTo(HaveKey(clusterv1.DeleteMachineAnnotation))
	})

	// The Machine as read may be stale: another ClusterAutoscaler's engine
	// may have marked it since, after a sweep removed the mark read.
	It("never removes a mark that another ClusterAutoscaler placed since the Machine was read", func() {
		ms := f.MachineSet("ms-0", 1, sizeAnnotations(0, 5), nil)
		f.Create(ctx, ms)
		machine := f.Machine("ms-0-a", ms)
		f.Create(ctx, machine)
		Expect(newResource(ms).MarkMachineForDeletion(ctx, machine)).To(Succeed())
		another := machine.DeepCopy()
		another.Annotations[MarkedAnnotation] = "ab5c1a1e-0000-4000-8000-000000000002/2026-01-02T03:04:06Z"
		Expect(k8sClient.Update(ctx, another)).To(Succeed())

		Expect(newResource(ms).UnmarkMachineForDeletion(ctx, machine)).To(Succeed())

		stored := &clusterv1.Machine{}
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(machine), stored)).To(Succeed())
		Expect(stored.Annotations).To(HaveKeyWithValue(MarkedAnnotation, another.Annotations[MarkedAnnotation]))
		Expect(stored.Annotations).To(HaveKey(clusterv1.DeleteMachineAnnotation))
	})

	It("fails to mark a Machine that is gone", func() {
		ms := f.MachineSet("ms-0", 1, sizeAnnotations(0, 5), nil)
		f.Create(ctx, ms)
		machine := f.Machine("ms-0-a", ms)
		f.Create(ctx, machine)
		Expect(k8sClient.Delete(ctx, machine)).To(Succeed())

		err := newResource(ms).MarkMachineForDeletion(ctx, machine)
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "got %v", err)
	})

	// A decision to lower the replicas can be minutes old when it is carried
	// out (a drain): the resource is read again when the replicas are
	// written, and the write is refused on what changed since.
	Describe("lowering replicas decides on the resource as it is now", func() {
		var md *clusterv1.MachineDeployment
		var r Resource
		BeforeEach(func() {
			md = f.MachineDeployment("md-0", 3, sizeAnnotations(1, 5))
			f.Create(ctx, md)
			f.Create(ctx, f.MachineSet("md-0-abc", 3, nil, md))
			r = newResource(md)
		})
		lower := func() error {
			_, err := r.UpdateReplicas(ctx, func(current int) (int, error) { return current - 1, nil })
			return err
		}
		update := func(change func(*clusterv1.MachineDeployment)) {
			GinkgoHelper()
			Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(md), md)).To(Succeed())
			change(md)
			Expect(k8sClient.Update(ctx, md)).To(Succeed())
		}

		It("refuses right after a template change its controller has not observed", func() {
			update(func(md *clusterv1.MachineDeployment) { md.Spec.Template.Labels["version"] = "v2" })

			Expect(r.CheckScaleDown(ctx, 1)).To(MatchError(ContainSubstring("generation 2, e.g. a new template, not yet observed")))
			Expect(lower()).To(MatchError(ContainSubstring("rolling out")))
			Expect(specReplicas(md)).To(BeEquivalentTo(3))
			Expect(r.UpdateReplicas(ctx, func(current int) (int, error) { return current + 1, nil })).To(Equal(4), "growing is no risk")
		})

		It("refuses once the Cluster was paused", func() {
			f.Cluster.Spec.Paused = ptr.To(true)
			Expect(k8sClient.Update(ctx, f.Cluster)).To(Succeed())

			Expect(r.Paused()).To(BeFalse(), "as it was read")
			Expect(lower()).To(MatchError(ContainSubstring("paused")))
			Expect(specReplicas(md)).To(BeEquivalentTo(3))
		})

		It("refuses once the resource has the paused annotation", func() {
			update(func(md *clusterv1.MachineDeployment) { md.Annotations[clusterv1.PausedAnnotation] = "" })
			Expect(r.CheckScaleDown(ctx, 1)).To(MatchError(ContainSubstring("paused")))
		})

		It("refuses once the size annotations are gone", func() {
			update(func(md *clusterv1.MachineDeployment) {
				delete(md.Annotations, MinSizeAnnotation)
				delete(md.Annotations, MaxSizeAnnotation)
			})
			Expect(lower()).To(MatchError(ContainSubstring("no longer has the autoscaler's size annotations")))
			Expect(specReplicas(md)).To(BeEquivalentTo(3))
		})

		It("refuses below a min size raised since", func() {
			update(func(md *clusterv1.MachineDeployment) { md.Annotations[MinSizeAnnotation] = "3" })
			var outOfBounds *OutOfBoundsError
			Expect(errors.As(lower(), &outOfBounds)).To(BeTrue())
			Expect(specReplicas(md)).To(BeEquivalentTo(3))
		})

		It("goes below the annotated min size to the one its rule gives, asked again at the write", func() {
			// A sleep window lowers the min size to 0 (autoscaler/minimums);
			// once it has ended, the rule gives the annotated one back.
			sleeping := true
			r = r.WithMinSize(func(annotated int) int {
				if sleeping {
					return 0
				}
				return annotated
			})
			Expect(r.MinSize()).To(Equal(0))
			Expect(lower()).To(Succeed())
			Expect(lower()).To(Succeed(), "below the annotated min size 1")
			Expect(specReplicas(md)).To(BeEquivalentTo(1))

			sleeping = false
			Expect(r.CheckScaleDown(ctx, 1)).To(MatchError(HaveSuffix("refusing to change replicas from 1 to 0, outside the bounds [1, 5] set by the " +
				`"cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size" and "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size" annotations and the scheduled minimums (annotated min size 1)`)))
			var outOfBounds *OutOfBoundsError
			Expect(errors.As(lower(), &outOfBounds)).To(BeTrue())
			Expect(specReplicas(md)).To(BeEquivalentTo(1))
		})

		It("refuses once the resource is gone", func() {
			Expect(k8sClient.Delete(ctx, md)).To(Succeed())
			Expect(r.CheckScaleDown(ctx, 1)).To(MatchError(ContainSubstring("no longer exists")))
		})

		It("takes its own writes of replicas for no rollout", func() {
			Expect(lower()).To(Succeed())
			Expect(lower()).To(Succeed(), "two writes of its own, none observed by a controller")
			Expect(specReplicas(md)).To(BeEquivalentTo(1))
		})
	})

	It("notices replicas another writer changed after its own write", func() {
		md := f.MachineDeployment("md-0", 2, sizeAnnotations(0, 5))
		f.Create(ctx, md)
		writes := NewWrites()
		read := func() Resource {
			GinkgoHelper()
			Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(md), md)).To(Succeed())
			r, err := New(md, Options{Client: k8sClient, Cluster: f.Cluster, Clock: clock, Writes: writes})
			Expect(err).NotTo(HaveOccurred())
			return r
		}
		Expect(read().UpdateReplicas(ctx, func(current int) (int, error) { return current + 1, nil })).To(Equal(3))
		Expect(read().ReplicasOverwritten()).To(BeEmpty())

		// A GitOps tool writes back what it declares.
		md.Spec.Replicas = ptr.To[int32](2)
		Expect(k8sClient.Update(ctx, md)).To(Succeed())

		Expect(read().ReplicasOverwritten()).To(ContainSubstring("replicas changed from 3, which the autoscaler set at 2026-01-02T03:04:05Z, to 2 by another writer"))
		Expect(read().UpdateReplicas(ctx, func(current int) (int, error) { return current + 1, nil })).To(Equal(3))
		Expect(read().ReplicasOverwritten()).To(BeEmpty(), "until the autoscaler writes them again")
	})

	It("removes only the deletion marks it placed", func() {
		ms := f.MachineSet("ms-0", 2, sizeAnnotations(0, 5), nil)
		f.Create(ctx, ms)
		ours, operators := f.Machine("ms-0-a", ms), f.Machine("ms-0-b", ms)
		operators.Annotations = map[string]string{clusterv1.DeleteMachineAnnotation: "yes"}
		f.Create(ctx, ours, operators)
		r := newResource(ms)

		Expect(r.MarkMachineForDeletion(ctx, ours)).To(Succeed())
		Expect(IsMarkedByAutoscaler(ours)).To(BeTrue())
		Expect(IsMarkedByAutoscaler(operators)).To(BeFalse())

		Expect(r.UnmarkMachineForDeletion(ctx, ours)).To(Succeed())
		Expect(r.UnmarkMachineForDeletion(ctx, operators)).To(Succeed())
		stored := &clusterv1.Machine{}
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(ours), stored)).To(Succeed())
		Expect(stored.Annotations).NotTo(HaveKey(clusterv1.DeleteMachineAnnotation))
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(operators), stored)).To(Succeed())
		Expect(stored.Annotations).To(HaveKeyWithValue(clusterv1.DeleteMachineAnnotation, "yes"), "an operator's mark stays")
	})

	DescribeTable("refuses an object with a wrong annotation, saying which and where",
		func(kind string) {
			obj := newOfKind(kind, "group", 1, map[string]string{MinSizeAnnotation: "3", MaxSizeAnnotation: "two"})
			f.Create(ctx, obj)
			_, err := New(obj, Options{Client: k8sClient, Cluster: f.Cluster})
			var annotationErr *AnnotationError
			Expect(errors.As(err, &annotationErr)).To(BeTrue(), "got %v", err)
			Expect(annotationErr.ID).To(Equal(kind + "/" + f.Namespace + "/group"))
			Expect(annotationErr.Annotation).To(Equal(MaxSizeAnnotation))
		},
		Entry("MachineDeployment", KindMachineDeployment),
		Entry("MachinePool", KindMachinePool),
	)
})

func names[T metav1.Object](objs []T) []string {
	var result []string
	for _, obj := range objs {
		result = append(result, obj.GetName())
	}
	return result
}
