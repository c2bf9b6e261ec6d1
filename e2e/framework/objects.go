package framework

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ObjectEvents lists the events of namespace about the object of kind and
// name with reason, as the core API shows them.
func ObjectEvents(ctx context.Context, g Gomega, c client.Client, namespace, kind, name, reason string) []corev1.Event {
	events := &corev1.EventList{}
	g.Expect(c.List(ctx, events, client.InNamespace(namespace))).To(Succeed())
	var out []corev1.Event
	for _, event := range events.Items {
		if event.InvolvedObject.Kind == kind && event.InvolvedObject.Name == name && event.Reason == reason {
			out = append(out, event)
		}
	}
	return out
}

// EventMessages are the messages of events.
func EventMessages(events []corev1.Event) []string {
	messages := make([]string, 0, len(events))
	for _, event := range events {
		messages = append(messages, event.Message)
	}
	return messages
}

// PatchObject reads obj again, changes it with mutate and patches it with an
// optimistic lock, retrying on conflicts; obj ends up as patched. With
// ignoreNotFound, an object that is gone is left alone.
func PatchObject[T client.Object](ctx context.Context, c client.Client, obj T, ignoreNotFound bool, mutate func(T)) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		if ignoreNotFound && apierrors.IsNotFound(err) {
			return
		}
		g.Expect(err).NotTo(HaveOccurred())
		before := obj.DeepCopyObject().(client.Object)
		mutate(obj)
		err = c.Patch(ctx, obj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		if ignoreNotFound {
			err = client.IgnoreNotFound(err)
		}
		g.Expect(err).NotTo(HaveOccurred())
	}, ClusterReadyTimeout, AutoscalerPoll).Should(Succeed())
}

// SetOrDelete sets key in *m to value, or deletes it when value is empty.
func SetOrDelete(m *map[string]string, key, value string) {
	if value == "" {
		delete(*m, key)
		return
	}
	if *m == nil {
		*m = map[string]string{}
	}
	(*m)[key] = value
}
