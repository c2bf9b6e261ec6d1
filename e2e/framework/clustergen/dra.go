package clustergen

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The DRA drivers: GPUs with a model, a core count and memory, and
// network cards with a speed and RDMA, local to their nodes; FPGAs with a
// family, attached over the network to the nodes of a zone.
const (
	GPUDriver  = "gpu.example.com"
	NICDriver  = "nic.example.com"
	FPGADriver = "fpga.example.com"
)

// FPGAZone is the zone whose nodes reach the FPGAs.
const FPGAZone = "zone-b"

// The device classes: every device of a driver (named after it), and
// narrower classes by a string attribute, a capacity and an int attribute.
const (
	DeviceClassGPU      = GPUDriver
	DeviceClassA100     = "gpu-a100"
	DeviceClassGPULarge = "gpu-large"
	DeviceClassNIC      = NICDriver
	DeviceClassNICFast  = "nic-fast"
	DeviceClassFPGA     = FPGADriver
)

// deviceClass is a device class and the driver whose devices it selects.
type deviceClass struct {
	name, driver string
	// selector narrows the driver's devices; "" takes them all.
	selector string
	// requestSelectors are what claims of the class may narrow it by.
	requestSelectors []string
}

// deviceClasses select devices by driver first, so that their other
// selectors only read attributes that the driver's devices all have: a
// missing attribute is a CEL runtime error, which kube-scheduler reports
// as a scheduling error, not as a node that does not fit.
var deviceClasses = []deviceClass{
	{name: DeviceClassGPU, driver: GPUDriver, requestSelectors: gpuSelectors},
	{name: DeviceClassA100, driver: GPUDriver, selector: `device.attributes["gpu.example.com"].model == "a100"`, requestSelectors: gpuSelectors},
	{name: DeviceClassGPULarge, driver: GPUDriver, selector: `device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0`, requestSelectors: gpuSelectors},
	{name: DeviceClassNIC, driver: NICDriver, requestSelectors: nicSelectors},
	{name: DeviceClassNICFast, driver: NICDriver, selector: `device.attributes["nic.example.com"].speedGbps >= 100`, requestSelectors: nicSelectors},
	{name: DeviceClassFPGA, driver: FPGADriver, requestSelectors: []string{`device.attributes["fpga.example.com"].family == "agilex"`}},
}

var (
	gpuSelectors = []string{
		`device.attributes["gpu.example.com"].model == "t4"`,
		`device.attributes["gpu.example.com"].model in ["a100", "h100"]`,
		`device.attributes["gpu.example.com"].cores >= 100`,
		`device.capacity["gpu.example.com"].memory.compareTo(quantity("24Gi")) >= 0`,
	}
	nicSelectors = []string{
		`device.attributes["nic.example.com"].rdma`,
		`device.attributes["nic.example.com"].speedGbps >= 25`,
	}
)

// gpuModel is what a node's GPUs are: all of one model, as in a machine
// type.
type gpuModel struct {
	model  string
	cores  int64
	memory string
}

var (
	gpuModels = []gpuModel{
		{model: "t4", cores: 40, memory: "16Gi"},
		{model: "l4", cores: 58, memory: "24Gi"},
		{model: "a100", cores: 108, memory: "40Gi"},
		{model: "a100", cores: 108, memory: "80Gi"},
		{model: "h100", cores: 132, memory: "80Gi"},
	}
	gpuCounts    = []int{1, 2, 4, 8, 8}
	nicSpeeds    = []int64{10, 25, 100}
	fpgaFamilies = []string{"agilex", "stratix"}
)

// claimsPerPod and deviceCounts lean to fewer, as workloads do.
var (
	claimsPerPod = []int{1, 1, 1, 2}
	deviceCounts = []int64{1, 1, 2, 2, 3, 4}
)

// deviceChances are, by node kind, the chances that a node publishes GPUs
// and network cards; the nodes of the kinds left out publish none.
var deviceChances = map[string]struct{ gpus, nics float64 }{
	"general": {gpus: 0.3, nics: 0.5},
	"compute": {gpus: 0.5, nics: 0.5},
	"memory":  {gpus: 0.2, nics: 0.3},
	"gpu":     {gpus: 0.9, nics: 0.5},
	"spot":    {gpus: 0.4, nics: 0.3},
}

// draState is what resource claims refer to.
type draState struct {
	// pools are the device pools each node reaches, by node name.
	pools map[string][]*devicePool
	// allocated are the claims allocated to bound pods, and pending are
	// those of pending pods, by namespace, for other pods to share.
	allocated, pending map[string][]string
	// claims counts the claims made, which their names number.
	claims int
}

// devicePool is the devices of one driver in one ResourceSlice: those of
// a node, or those the nodes of a zone reach.
type devicePool struct {
	driver, name string
	// node is the node of a local pool; "" for one of a zone.
	node string
	// nodes selects the nodes that reach the devices, as allocations from
	// the pool record it.
	nodes *corev1.NodeSelector
	// free are the devices no claim holds yet.
	free []string
}

// draObjects makes the device classes and the ResourceSlices: of some
// nodes, and of the FPGAs of FPGAZone.
func (g *generator) draObjects() {
	g.dra = &draState{pools: map[string][]*devicePool{}, allocated: map[string][]string{}, pending: map[string][]string{}}
	for _, class := range deviceClasses {
		g.c.DeviceClasses = append(g.c.DeviceClasses, class.object())
	}
	fpgas := g.publish(&devicePool{driver: FPGADriver, name: "fpgas-" + FPGAZone, nodes: inZone(FPGAZone)}, g.fpgas(4))
	for _, node := range g.c.Nodes {
		chances := deviceChances[g.kindOf[node.Name].name]
		if g.chance(chances.gpus) {
			g.reach(node.Name, g.publish(localPool(node.Name, GPUDriver), gpus(pick(g, gpuModels), pick(g, gpuCounts))))
		}
		if g.chance(chances.nics) {
			g.reach(node.Name, g.publish(localPool(node.Name, NICDriver), g.nics(pick(g, nicSpeeds), g.between(1, 6))))
		}
		if node.Labels[corev1.LabelTopologyZone] == FPGAZone {
			g.reach(node.Name, fpgas)
		}
	}
}

// localPool is the pool of a driver's devices on a node, named after the
// node as kubelet plugins name it.
func localPool(node, driver string) *devicePool {
	return &devicePool{driver: driver, name: node, node: node, nodes: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchFields: []corev1.NodeSelectorRequirement{{Key: metav1.ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
	}}}}
}

// inZone selects the nodes of a zone.
func inZone(zone string) *corev1.NodeSelector {
	return &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{zone}}},
	}}}
}

// reach records that a node's pods can have devices of the pool.
func (g *generator) reach(node string, pool *devicePool) {
	g.dra.pools[node] = append(g.dra.pools[node], pool)
}

func (c deviceClass) object() *resourceapi.DeviceClass {
	selectors := []resourceapi.DeviceSelector{celSelector(fmt.Sprintf("device.driver == %q", c.driver))}
	if c.selector != "" {
		selectors = append(selectors, celSelector(c.selector))
	}
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: c.name},
		Spec:       resourceapi.DeviceClassSpec{Selectors: selectors},
	}
}

func celSelector(expression string) resourceapi.DeviceSelector {
	return resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: expression}}
}

// publish adds the pool's ResourceSlice, the whole of the pool: for the
// node of a local pool, as a kubelet plugin publishes it, or for the nodes
// the pool selects.
func (g *generator) publish(pool *devicePool, devices []resourceapi.Device) *devicePool {
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: pool.name + "-" + pool.driver},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:  pool.driver,
			Pool:    resourceapi.ResourcePool{Name: pool.name, ResourceSliceCount: 1},
			Devices: devices,
		},
	}
	if pool.node != "" {
		slice.Spec.NodeName = ptr.To(pool.node)
	} else {
		slice.Spec.NodeSelector = pool.nodes.DeepCopy()
	}
	g.c.ResourceSlices = append(g.c.ResourceSlices, slice)
	for _, device := range devices {
		pool.free = append(pool.free, device.Name)
	}
	return pool
}

// gpus are a node's GPUs, all of one model.
func gpus(model gpuModel, count int) []resourceapi.Device {
	devices := make([]resourceapi.Device, count)
	for i := range devices {
		devices[i] = resourceapi.Device{
			Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"model": {StringValue: ptr.To(model.model)},
				"cores": {IntValue: ptr.To(model.cores)},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				"memory": {Value: resource.MustParse(model.memory)},
			},
		}
	}
	return devices
}

// nics are a node's network cards: all of one speed, some with RDMA.
func (g *generator) nics(speed int64, count int) []resourceapi.Device {
	devices := make([]resourceapi.Device, count)
	for i := range devices {
		devices[i] = resourceapi.Device{
			Name: fmt.Sprintf("nic-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"speedGbps": {IntValue: ptr.To(speed)},
				"rdma":      {BoolValue: ptr.To(speed == 100 && g.chance(0.7))},
			},
		}
	}
	return devices
}

// fpgas are the devices of the FPGA pool, of either family.
func (g *generator) fpgas(count int) []resourceapi.Device {
	devices := make([]resourceapi.Device, count)
	for i := range devices {
		devices[i] = resourceapi.Device{
			Name:       fmt.Sprintf("fpga-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"family": {StringValue: ptr.To(pick(g, fpgaFamilies))}},
		}
	}
	return devices
}

// claimRequest is the name of the one request of allocated claims.
const claimRequest = "devices"

// allocateTo gives a bound pod a claim for some of the free devices of a
// pool its node reaches, allocated and reserved for it as kube-scheduler
// leaves it; the pod's UID in status.reservedFor is left for whoever
// creates the pod.
func (s *draState) allocateTo(g *generator, pod *corev1.Pod, node string) {
	var pools []*devicePool
	for _, pool := range s.pools[node] {
		if len(pool.free) > 0 {
			pools = append(pools, pool)
		}
	}
	if len(pools) == 0 {
		return
	}
	pool := pick(g, pools)
	count := g.between(1, min(len(pool.free), 2))
	claim := s.claim(pod.Namespace, resourceapi.DeviceRequest{Name: claimRequest, Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: pool.driver, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(count),
	}})
	results := make([]resourceapi.DeviceRequestAllocationResult, count)
	for i, device := range pool.free[:count] {
		results[i] = resourceapi.DeviceRequestAllocationResult{Request: claimRequest, Driver: pool.driver, Pool: pool.name, Device: device}
	}
	pool.free = pool.free[count:]
	claim.Status = resourceapi.ResourceClaimStatus{
		Allocation: &resourceapi.AllocationResult{
			Devices:      resourceapi.DeviceAllocationResult{Results: results},
			NodeSelector: pool.nodes.DeepCopy(),
		},
		ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name}},
	}
	g.c.ResourceClaims = append(g.c.ResourceClaims, claim)
	s.allocated[pod.Namespace] = append(s.allocated[pod.Namespace], claim.Name)
	useClaim(pod, claim.Name)
}

// devicePod returns a pending pod with resource claims, which mostly
// decide where it fits: its requests are modest and its other constraints
// fewer than those of other pending pods.
func (g *generator) devicePod(name string) *corev1.Pod {
	pod := g.pod(name, pick(g, namespaces).name)
	pod.Spec.Containers = []corev1.Container{g.container("app", "500m", "1Gi")}
	g.dra.claimsOf(g, pod)
	if g.chance(0.15) {
		g.nodeAffinity(pod)
	}
	if g.chance(0.2) {
		g.tolerations(pod)
	}
	if g.chance(0.15) {
		g.topologySpread(pod)
	}
	if g.chance(0.1) {
		g.podAntiAffinity(pod)
	}
	return pod
}

// claimsOf gives a pending pod one or two claims: new claims, claims of
// other pending pods, or claims allocated to bound pods, which then hold
// it on their node. Most such pods tolerate the gpu kind's taint, as GPU
// workloads do.
func (s *draState) claimsOf(g *generator, pod *corev1.Pod) {
	for range pick(g, claimsPerPod) {
		var name string
		switch n := g.rnd.IntN(100); {
		case n < 20 && len(s.allocated[pod.Namespace]) > 0:
			name = pick(g, s.allocated[pod.Namespace])
		case n < 30 && len(s.pending[pod.Namespace]) > 0:
			name = pick(g, s.pending[pod.Namespace])
		default:
			name = s.newClaim(g, pod.Namespace)
		}
		useClaim(pod, name)
	}
	if g.chance(0.7) {
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{Key: string(GPUResource), Operator: corev1.TolerationOpExists})
	}
}

// newClaim returns the name of a new claim, not allocated, of one or two
// requests.
func (s *draState) newClaim(g *generator, namespace string) string {
	requests := []resourceapi.DeviceRequest{g.deviceRequest("first")}
	if g.chance(0.2) {
		requests = append(requests, g.deviceRequest("second"))
	}
	claim := s.claim(namespace, requests...)
	g.c.ResourceClaims = append(g.c.ResourceClaims, claim)
	s.pending[namespace] = append(s.pending[namespace], claim.Name)
	return claim.Name
}

// deviceRequest asks for 1 to 4 devices of a class or for all of them,
// sometimes narrowed by a selector of its own, or, rarely, for a
// prioritized list: two A100s, else one GPU of any model.
func (g *generator) deviceRequest(name string) resourceapi.DeviceRequest {
	if g.chance(0.1) {
		return resourceapi.DeviceRequest{Name: name, FirstAvailable: []resourceapi.DeviceSubRequest{
			{Name: "a100", DeviceClassName: DeviceClassA100, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2},
			{Name: "any", DeviceClassName: DeviceClassGPU, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
		}}
	}
	class := pick(g, deviceClasses)
	exactly := &resourceapi.ExactDeviceRequest{DeviceClassName: class.name, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: pick(g, deviceCounts)}
	if g.chance(0.15) {
		exactly.AllocationMode, exactly.Count = resourceapi.DeviceAllocationModeAll, 0
	}
	if g.chance(0.3) {
		exactly.Selectors = []resourceapi.DeviceSelector{celSelector(pick(g, class.requestSelectors))}
	}
	return resourceapi.DeviceRequest{Name: name, Exactly: exactly}
}

func (s *draState) claim(namespace string, requests ...resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
	s.claims++
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: fmt.Sprintf("devices-%04d", s.claims)},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: requests}},
	}
}

// useClaim makes the pod's first container use the claim, by name: the
// harness runs no resource claim controller to make claims from
// templates.
func useClaim(pod *corev1.Pod, claim string) {
	for _, ref := range pod.Spec.ResourceClaims {
		if ptr.Deref(ref.ResourceClaimName, "") == claim {
			return
		}
	}
	ref := corev1.PodResourceClaim{Name: fmt.Sprintf("claim-%d", len(pod.Spec.ResourceClaims)), ResourceClaimName: ptr.To(claim)}
	pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, ref)
	pod.Spec.Containers[0].Resources.Claims = append(pod.Spec.Containers[0].Resources.Claims, corev1.ResourceClaim{Name: ref.Name})
}
