package controller

import (
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
)

var _ = Describe("The events of a ClusterAutoscaler", func() {
	It("are recorded with their notes cut to what the events API accepts", func() {
		fixture := newWorkloadCluster(env.Config.Host)
		key := createNamedClusterAutoscaler(fixture, "long-notes")
		DeferCleanup(deleteClusterAutoscaler, key)

		reconciler.Recorder.Eventf(getClusterAutoscaler(Default, key), nil, corev1.EventTypeNormal, "LongNote", autoscaleAction, "%s", strings.Repeat("x", 3*maxEventNote))

		expectEvent(fixture.Namespace, key, corev1.EventTypeNormal, "LongNote", SatisfyAll(HaveLen(maxEventNote), HaveSuffix("...")))
	})
})
