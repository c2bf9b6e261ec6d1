package controller

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	capacitybufferv1beta1 "github.com/capi-autoscaler/capi-autoscaler/api/capacitybuffer/v1beta1"
)

// listCounter is a client whose lists fail with err, or succeed when err is
// nil, and are counted.
type listCounter struct {
	client.WithWatch
	lists int
}

func newListCounter(t *testing.T, err *error) *listCounter {
	scheme := runtime.NewScheme()
	if e := capacitybufferv1beta1.AddToScheme(scheme); e != nil {
		t.Fatal(e)
	}
	counter := &listCounter{}
	counter.WithWatch = interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme).Build(), interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			counter.lists++
			if *err != nil {
				return *err
			}
			return c.List(ctx, list, opts...)
		},
	})
	return counter
}

// A role that cannot list the kind must not reach the cache, whose informer
// would wait for a sync that never comes and hold the engine's loop.
func TestAnOptionalKindTheRoleCannotListIsNotListedFromTheCache(t *testing.T) {
	g := NewWithT(t)
	liveErr := error(apierrors.NewForbidden(schema.GroupResource{Group: "autoscaling.x-k8s.io", Resource: "capacitybuffers"}, "", nil))
	var cachedErr error
	live, cached := newListCounter(t, &liveErr), newListCounter(t, &cachedErr)
	clock := clocktesting.NewFakeClock(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC))
	kind := &optionalKind{kind: "CapacityBuffers", cached: cached, clock: clock,
		live: func(context.Context) (client.Client, error) { return live, nil }}

	listed, err := kind.list(context.Background(), &capacitybufferv1beta1.CapacityBufferList{})
	g.Expect(listed).To(BeFalse())
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the error says why: %v", err)
	g.Expect(err.Error()).To(ContainSubstring("listing CapacityBuffers"))
	g.Expect(cached.lists).To(Equal(0), "the cache is not asked")

	clock.Step(optionalKindRetry / 2)
	_, again := kind.list(context.Background(), &capacitybufferv1beta1.CapacityBufferList{})
	g.Expect(again).To(MatchError(err))
	g.Expect(live.lists).To(Equal(1), "not tried again before %s", optionalKindRetry)

	// The role is granted the rules.
	liveErr = nil
	clock.Step(optionalKindRetry / 2)
	listed, err = kind.list(context.Background(), &capacitybufferv1beta1.CapacityBufferList{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(listed).To(BeTrue())
	g.Expect(live.lists).To(Equal(2))
	g.Expect(cached.lists).To(Equal(1))

	_, _ = kind.list(context.Background(), &capacitybufferv1beta1.CapacityBufferList{})
	g.Expect(live.lists).To(Equal(2), "once readable, lists come from the cache only")
	g.Expect(cached.lists).To(Equal(2))
}

// A workload cluster without the CRD has none of the kind: no error.
func TestAnOptionalKindWithoutItsCRDListsNothingAndNoError(t *testing.T) {
	g := NewWithT(t)
	liveErr := error(&meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: "autoscaling.x-k8s.io", Kind: "CapacityBuffer"}})
	var cachedErr error
	live, cached := newListCounter(t, &liveErr), newListCounter(t, &cachedErr)
	kind := &optionalKind{kind: "CapacityBuffers", cached: cached, clock: clocktesting.NewFakeClock(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)),
		live: func(context.Context) (client.Client, error) { return live, nil }}

	listed, err := kind.list(context.Background(), &capacitybufferv1beta1.CapacityBufferList{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(listed).To(BeFalse())
	g.Expect(cached.lists).To(Equal(0))
}
