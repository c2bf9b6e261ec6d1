package framework

import (
	"context"
	"fmt"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// DRADriverInput is the input of StartDRADriver.
type DRADriverInput struct {
	// Client talks to the workload cluster.
	Client client.Client
	// NodeLabels select the Nodes the driver runs on.
	NodeLabels map[string]string
	// Driver is the DRA driver's name.
	Driver string
	// Devices is how many devices the driver publishes for each Node.
	Devices int
	// PublishAfter is how long after a Node is Ready the driver publishes
	// its devices: a driver's kubelet plugin starts on the Node, once it
	// runs.
	PublishAfter time.Duration
}

// StartDRADriver does for every selected Node, once it is Ready, what a
// DRA driver's kubelet plugin does: it publishes the Node's devices in a
// ResourceSlice. Like most drivers it sets no startup taint: until it
// publishes, the Node is Ready with no devices. The devices are named
// gpu-0, gpu-1... and have the "type" attribute the upstream Cluster API
// provider gives the devices of a group at zero (snapshot.TemplateDevices),
// so that a group's template describes its Nodes. It stops after the spec,
// and deletes the slices it published.
func StartDRADriver(ctx context.Context, input DRADriverInput) {
	startNodeAgent(ctx, nodeAgent{
		name: "DRA driver " + input.Driver, client: input.Client, nodeLabels: input.NodeLabels, delay: input.PublishAfter,
		publish: func(node *corev1.Node) []client.Object {
			slice := &resourceapi.ResourceSlice{
				ObjectMeta: metav1.ObjectMeta{Name: node.Name + "-" + input.Driver, OwnerReferences: ownedByNode(node)},
				Spec: resourceapi.ResourceSliceSpec{
					Driver:   input.Driver,
					NodeName: ptr.To(node.Name),
					Pool:     resourceapi.ResourcePool{Name: node.Name, ResourceSliceCount: 1},
				},
			}
			for i := range input.Devices {
				slice.Spec.Devices = append(slice.Spec.Devices, resourceapi.Device{
					Name: "gpu-" + strconv.Itoa(i),
					Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
						"type": {StringValue: ptr.To(snapshot.TemplateDeviceType)},
					},
				})
			}
			return []client.Object{slice}
		},
	})
}

// CreateDeviceClass creates a DeviceClass of every device of driver, and
// deletes it after the spec. DeviceClasses are cluster-scoped: name it
// after the spec's namespace.
func CreateDeviceClass(ctx context.Context, c client.Client, name, driver string) *resourceapi.DeviceClass {
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", driver)},
		}}},
	}
	Expect(c.Create(ctx, class)).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		Expect(client.IgnoreNotFound(c.Delete(ctx, class))).To(Succeed())
	})
	return class
}

// CreateDeviceClaimTemplate creates a ResourceClaimTemplate for count
// devices of class.
func CreateDeviceClaimTemplate(ctx context.Context, c client.Client, namespace, name, class string, count int64) *resourceapi.ResourceClaimTemplate {
	template := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{
			Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "devices",
				Exactly: &resourceapi.ExactDeviceRequest{
					DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
				},
			}}},
		}},
	}
	Expect(c.Create(ctx, template)).To(Succeed())
	return template
}

// WithClaimFromTemplate is a WorkloadInput.Mutate: every pod gets a
// resource claim of its own from the named ResourceClaimTemplate, used by
// its container.
func WithClaimFromTemplate(claimTemplate string) func(*corev1.PodTemplateSpec) {
	return func(template *corev1.PodTemplateSpec) {
		const claim = "devices"
		template.Spec.ResourceClaims = append(template.Spec.ResourceClaims, corev1.PodResourceClaim{
			Name: claim, ResourceClaimTemplateName: ptr.To(claimTemplate),
		})
		for i := range template.Spec.Containers {
			resources := &template.Spec.Containers[i].Resources
			resources.Claims = append(resources.Claims, corev1.ResourceClaim{Name: claim})
		}
	}
}
