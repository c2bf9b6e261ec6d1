package clusterapi

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// answeringReader reads as a cache does: it answers with answer, or, for
// kinds that hang, waits until the context ends. It counts the reads of
// each kind.
type answeringReader struct {
	hangs  schema.GroupKind
	answer error
	reads  map[schema.GroupKind]int
}

func (r *answeringReader) client() client.Reader {
	return interceptor.NewClient(fake.NewClientBuilder().Build(), interceptor.Funcs{
		Get: func(ctx context.Context, _ client.WithWatch, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
			kind := obj.GetObjectKind().GroupVersionKind().GroupKind()
			r.reads[kind]++
			if kind == r.hangs {
				<-ctx.Done()
				return errors.New("failed waiting for *unstructured.Unstructured Informer to sync")
			}
			return r.answer
		},
	})
}

func object(kind schema.GroupKind) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(kind.WithVersion("v1alpha1"))
	return obj
}

func TestTemplateReaderRemembersTheKindsThatDidNotAnswerUntilTheRetry(t *testing.T) {
	hanging := schema.GroupKind{Group: "infrastructure.other.example.com", Kind: "OtherMachineTemplate"}
	answering := schema.GroupKind{Group: "infrastructure.cluster.x-k8s.io", Kind: "DockerMachineTemplate"}

	t.Run("a read that does not answer within the bound fails, and its kind is not read again until the retry", func(t *testing.T) {
		g := NewWithT(t)
		reader := &answeringReader{hangs: hanging, reads: map[schema.GroupKind]int{}}
		clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		templates := newTemplateReader(reader.client(), 10*time.Millisecond, clk)
		timedOut := MatchError("timed out after 10ms waiting for the manager's cache of OtherMachineTemplate.infrastructure.other.example.com, " +
			"which is read again every 5m0s: does the manager have RBAC to list and watch it?")

		g.Expect(templates.Get(context.Background(), client.ObjectKey{Name: "a"}, object(hanging))).To(timedOut)
		g.Expect(templates.Get(context.Background(), client.ObjectKey{Name: "b"}, object(hanging))).To(timedOut, "the same message, so one event")
		g.Expect(templates.Get(context.Background(), client.ObjectKey{Name: "c"}, object(answering))).To(Succeed())
		g.Expect(reader.reads).To(Equal(map[schema.GroupKind]int{hanging: 1, answering: 1}), "every object of the kind waits alike")

		clk.SetTime(clk.Now().Add(unansweredKindRetry))
		g.Expect(templates.Get(context.Background(), client.ObjectKey{Name: "a"}, object(hanging))).To(timedOut)
		g.Expect(reader.reads[hanging]).To(Equal(2), "read again at the retry")
	})

	t.Run("a kind that answers, even with an error, is read every time", func(t *testing.T) {
		g := NewWithT(t)
		forbidden := errors.New("forbidden")
		reader := &answeringReader{answer: forbidden, reads: map[schema.GroupKind]int{}}
		templates := newTemplateReader(reader.client(), 10*time.Millisecond, clocktesting.NewFakePassiveClock(time.Now()))

		for range 2 {
			g.Expect(templates.Get(context.Background(), client.ObjectKey{Name: "a"}, object(answering))).To(MatchError(forbidden))
		}
		g.Expect(reader.reads[answering]).To(Equal(2))
	})

	t.Run("a read cut by the end of the loop, not by its bound, is not remembered", func(t *testing.T) {
		g := NewWithT(t)
		reader := &answeringReader{hangs: hanging, reads: map[schema.GroupKind]int{}}
		templates := newTemplateReader(reader.client(), time.Hour, clocktesting.NewFakePassiveClock(time.Now()))
		loop, cancel := context.WithCancel(context.Background())
		cancel()

		g.Expect(templates.Get(loop, client.ObjectKey{Name: "a"}, object(hanging))).To(MatchError(ContainSubstring("failed waiting for")))
		g.Expect(templates.unanswered).To(BeEmpty())
	})
}
