package clustergen

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2/ktesting"
)

func TestGenerateDRAObjectsThatHoldTogether(t *testing.T) {
	g := NewWithT(t)
	c := Generate(Options{Seed: 2, PendingPods: 1000, DRA: true})

	nodes := map[string]*corev1.Node{}
	for _, node := range c.Nodes {
		nodes[node.Name] = node
	}
	devices := sets.New[structured.DeviceID]()
	publishing := sets.New[string]()
	for _, slice := range c.ResourceSlices {
		g.Expect(validation.IsDNS1123Subdomain(slice.Name)).To(BeEmpty())
		g.Expect(slice.Spec.Pool.ResourceSliceCount).To(BeEquivalentTo(1))
		if node := slice.Spec.NodeName; node != nil {
			g.Expect(nodes).To(HaveKey(*node), "slice %s is for a node that exists", slice.Name)
			publishing.Insert(*node)
		} else {
			g.Expect(slice.Spec.NodeSelector.NodeSelectorTerms).To(HaveLen(1), "a slice's node selector has one term")
		}
		for _, device := range slice.Spec.Devices {
			g.Expect(validation.IsDNS1123Label(device.Name)).To(BeEmpty())
			for name := range device.Attributes {
				g.Expect(validation.IsQualifiedName(string(name))).To(BeEmpty())
			}
			devices.Insert(structured.MakeDeviceID(slice.Spec.Driver, slice.Spec.Pool.Name, device.Name))
		}
	}
	g.Expect(publishing.Len()).To(BeNumerically("<", len(nodes)), "some nodes publish no devices")

	classes := sets.New[string]()
	for _, class := range c.DeviceClasses {
		classes.Insert(class.Name)
	}
	boundPods := map[string]*corev1.Pod{}
	for _, pod := range c.BoundPods {
		boundPods[pod.Namespace+"/"+pod.Name] = pod
	}
	claims := map[string]*resourceapi.ResourceClaim{}
	allocated := sets.New[structured.DeviceID]()
	allocatedDrivers := sets.New[string]()
	for _, claim := range c.ResourceClaims {
		claims[claim.Namespace+"/"+claim.Name] = claim
		for _, class := range requestedClasses(claim) {
			g.Expect(classes.Has(class)).To(BeTrue(), "claim %s asks for a class that exists", claim.Name)
		}
		allocation := claim.Status.Allocation
		if allocation == nil {
			g.Expect(claim.Status.ReservedFor).To(BeEmpty())
			continue
		}
		for _, result := range allocation.Devices.Results {
			id := structured.MakeDeviceID(result.Driver, result.Pool, result.Device)
			g.Expect(devices.Has(id)).To(BeTrue(), "claim %s holds device %s, which a slice publishes", claim.Name, id)
			g.Expect(allocated.Has(id)).To(BeFalse(), "device %s is allocated once", id)
			allocated.Insert(id)
			allocatedDrivers.Insert(result.Driver)
		}
		selector, err := nodeaffinity.NewNodeSelector(allocation.NodeSelector)
		g.Expect(err).NotTo(HaveOccurred())
		// kube-scheduler and the resource claim controller deallocate
		// claims that no pod holds.
		g.Expect(claim.Status.ReservedFor).NotTo(BeEmpty(), "claim %s is reserved", claim.Name)
		for _, consumer := range claim.Status.ReservedFor {
			pod := boundPods[claim.Namespace+"/"+consumer.Name]
			g.Expect(pod).NotTo(BeNil(), "claim %s is reserved for a bound pod", claim.Name)
			g.Expect(selector.Match(nodes[pod.Spec.NodeName])).To(BeTrue(), "claim %s is allocated where its pod runs", claim.Name)
			g.Expect(claimNames(pod)).To(ContainElement(claim.Name))
		}
	}
	g.Expect(allocatedDrivers).To(Equal(sets.New(GPUDriver, NICDriver, FPGADriver)), "bound pods hold devices of every driver, local or not")

	withClaims, sharingAllocated := 0, 0
	for _, pod := range c.PendingPods {
		if len(pod.Spec.ResourceClaims) > 0 {
			withClaims++
		}
		for _, name := range claimNames(pod) {
			claim := claims[pod.Namespace+"/"+name]
			g.Expect(claim).NotTo(BeNil(), "pod %s/%s references a claim that exists", pod.Namespace, pod.Name)
			if claim.Status.Allocation != nil {
				sharingAllocated++
			}
		}
	}
	g.Expect(withClaims).To(BeNumerically("~", len(c.PendingPods)*15/100, len(c.PendingPods)/20), "about one pending pod in seven has claims")
	g.Expect(sharingAllocated).To(BeNumerically(">", 0), "some pending pods share claims allocated to bound pods")
}

func TestGenerateDRAClaimsOfEveryShape(t *testing.T) {
	g := NewWithT(t)
	c := Generate(Options{Seed: 3, PendingPods: 1000, DRA: true})
	shapes := map[string]bool{}
	for _, claim := range c.ResourceClaims {
		shapes["two requests"] = shapes["two requests"] || len(claim.Spec.Devices.Requests) > 1
		for _, request := range claim.Spec.Devices.Requests {
			shapes["prioritized list"] = shapes["prioritized list"] || len(request.FirstAvailable) > 0
			if exactly := request.Exactly; exactly != nil {
				shapes["all"] = shapes["all"] || exactly.AllocationMode == resourceapi.DeviceAllocationModeAll
				shapes["4 devices"] = shapes["4 devices"] || exactly.Count == 4
				shapes["selector"] = shapes["selector"] || len(exactly.Selectors) > 0
			}
		}
	}
	g.Expect(shapes).To(Equal(map[string]bool{"two requests": true, "prioritized list": true, "all": true, "4 devices": true, "selector": true}))
}

// A selector that reads an attribute a device lacks is a CEL runtime
// error, which kube-scheduler reports as a scheduling error.
func TestGenerateDRASelectorsEvaluateOnTheirDriversDevices(t *testing.T) {
	g := NewWithT(t)
	_, ctx := ktesting.NewTestContext(t)
	c := Generate(Options{Seed: 1, DRA: true})
	compiler := cel.GetCompiler(cel.Features{})
	for _, class := range deviceClasses {
		expressions := append([]string{class.selector}, class.requestSelectors...)
		for _, slice := range c.ResourceSlices {
			if slice.Spec.Driver != class.driver {
				continue
			}
			for _, device := range slice.Spec.Devices {
				for _, expression := range expressions {
					if expression == "" {
						continue
					}
					compiled := compiler.CompileCELExpression(expression, cel.Options{})
					g.Expect(compiled.Error).NotTo(HaveOccurred(), expression)
					_, _, err := compiled.DeviceMatches(ctx, cel.Device{Driver: slice.Spec.Driver, Attributes: device.Attributes, Capacity: device.Capacity})
					g.Expect(err).NotTo(HaveOccurred(), "%s on device %s of %s", expression, device.Name, slice.Name)
				}
			}
		}
	}
}

func requestedClasses(claim *resourceapi.ResourceClaim) []string {
	var classes []string
	for _, request := range claim.Spec.Devices.Requests {
		if request.Exactly != nil {
			classes = append(classes, request.Exactly.DeviceClassName)
		}
		for _, sub := range request.FirstAvailable {
			classes = append(classes, sub.DeviceClassName)
		}
	}
	return classes
}

func claimNames(pod *corev1.Pod) []string {
	var names []string
	for _, ref := range pod.Spec.ResourceClaims {
		names = append(names, *ref.ResourceClaimName)
	}
	return names
}
