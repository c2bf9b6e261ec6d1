package clustergen

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
)

func TestGenerateIsDeterministic(t *testing.T) {
	g := NewWithT(t)
	opts := Options{Seed: 7, Volumes: true, DRA: true}
	g.Expect(Generate(opts)).To(Equal(Generate(opts)))
	g.Expect(Generate(Options{Seed: 8, Volumes: true, DRA: true})).NotTo(Equal(Generate(opts)))
}

func TestGenerateCoversTheConstraints(t *testing.T) {
	g := NewWithT(t)
	c := Generate(Options{Seed: 1, PendingPods: 500})
	g.Expect(c.PendingPods).To(HaveLen(500))
	g.Expect(c.PersistentVolumeClaims).To(BeEmpty(), "volumes are an option")
	g.Expect(c.ResourceClaims).To(BeEmpty(), "DRA is an option")
	covered := map[string]bool{}
	for _, pod := range c.PendingPods {
		spec := pod.Spec
		covered["nodeSelector"] = covered["nodeSelector"] || len(spec.NodeSelector) > 0
		covered["tolerations"] = covered["tolerations"] || len(spec.Tolerations) > 0
		covered["spread"] = covered["spread"] || len(spec.TopologySpreadConstraints) > 0
		covered["initContainers"] = covered["initContainers"] || len(spec.InitContainers) > 0
		covered["hostPorts"] = covered["hostPorts"] || len(spec.Containers[0].Ports) > 0
		covered["gpu"] = covered["gpu"] || !spec.Containers[0].Resources.Requests.Name(GPUResource, "").IsZero()
		if a := spec.Affinity; a != nil {
			covered["nodeAffinity"] = covered["nodeAffinity"] || a.NodeAffinity != nil
			covered["podAffinity"] = covered["podAffinity"] || a.PodAffinity != nil
			covered["podAntiAffinity"] = covered["podAntiAffinity"] || a.PodAntiAffinity != nil
		}
	}
	for _, feature := range []string{"nodeSelector", "tolerations", "spread", "initContainers", "hostPorts", "gpu", "nodeAffinity", "podAffinity", "podAntiAffinity"} {
		g.Expect(covered).To(HaveKey(feature))
		g.Expect(covered[feature]).To(BeTrue(), "some pending pod uses %s", feature)
	}
	for _, pod := range c.BoundPods {
		g.Expect(pod.Spec.NodeName).NotTo(BeEmpty())
	}
	unschedulable := 0
	for _, node := range c.Nodes {
		if node.Spec.Unschedulable {
			unschedulable++
		}
	}
	g.Expect(unschedulable).To(BeNumerically(">", 0))
}

func TestGenerateVolumes(t *testing.T) {
	g := NewWithT(t)
	c := Generate(Options{Seed: 3, Volumes: true})
	g.Expect(c.StorageClasses).NotTo(BeEmpty())
	g.Expect(c.CSINodes).NotTo(BeEmpty())
	phases := map[corev1.PersistentVolumeClaimPhase]int{}
	for _, claim := range c.PersistentVolumeClaims {
		phases[claim.Status.Phase]++
		if claim.Status.Phase == corev1.ClaimBound {
			g.Expect(claim.Spec.VolumeName).NotTo(BeEmpty())
			g.Expect(claim.Annotations).To(HaveKeyWithValue(BindCompletedAnnotation, "yes"))
		}
	}
	g.Expect(phases[corev1.ClaimBound]).To(BeNumerically(">", 0))
	g.Expect(phases[corev1.ClaimPending]).To(BeNumerically(">", 0))
	for _, volume := range c.PersistentVolumes {
		if volume.Spec.ClaimRef == nil {
			g.Expect(volume.Spec.StorageClassName).To(Equal(ClassLocal), "only classes without a provisioner have available static volumes")
		}
	}
}
