package autoscaler

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// awaitDevices returns nodes with each node that waits for its DRA devices
// held as not started (nodefacts.AwaitingDevices): a node registered less
// than nodefacts.MaxStartupTime ago, Ready, whose group expects devices of
// a driver that has published none for it yet. A group expects the
// drivers that publish node-local devices on its members, or, while none
// does (it just grew from zero), those of its template node
// (snapshot.TemplateDevicesAnnotation). Until its drivers publish, the
// pods that wait for its devices wait for it rather than ask for another
// node, its template's devices stand in for its own, and it is neither the
// group's template nor removed as empty. Older nodes are left as they
// are: a driver that stops publishing for a running node does not make it
// unready.
func awaitDevices(ctx context.Context, groups []nodegroups.NodeGroup, nodes []*corev1.Node, resourceSlices []*resourceapi.ResourceSlice, now time.Time) []*corev1.Node {
	youngAndReady := func(node *corev1.Node) bool {
		return now.Sub(node.CreationTimestamp.Time) < nodefacts.MaxStartupTime && nodefacts.KubeletReady(node)
	}
	// Most loops have no young node: they pay for this scan only.
	young := slices.IndexFunc(nodes, youngAndReady)
	if young < 0 {
		return nodes
	}
	type nodeDriver struct{ node, driver string }
	published := make(map[nodeDriver]bool, len(resourceSlices))
	groupOf := map[string]int{}
	for i, group := range groups {
		for _, instance := range group.Instances() {
			if instance.NodeName != "" {
				groupOf[instance.NodeName] = i
			}
		}
	}
	groupDrivers := make([]sets.Set[string], len(groups))
	for _, slice := range resourceSlices {
		node := snapshot.LocalSliceNode(slice)
		group, ok := groupOf[node]
		if !ok {
			continue
		}
		published[nodeDriver{node, slice.Spec.Driver}] = true
		if groupDrivers[group] == nil {
			groupDrivers[group] = sets.New[string]()
		}
		groupDrivers[group].Insert(slice.Spec.Driver)
	}
	var awaited []*corev1.Node
	for i := young; i < len(nodes); i++ {
		node := nodes[i]
		group, ok := groupOf[node.Name]
		if !ok || !youngAndReady(node) {
			continue
		}
		if groupDrivers[group] == nil {
			// Asked once a loop, and only for a group with a young node.
			groupDrivers[group] = templateDrivers(ctx, groups[group])
		}
		var missing []string
		for _, driver := range sets.List(groupDrivers[group]) {
			if !published[nodeDriver{node.Name, driver}] {
				missing = append(missing, driver)
			}
		}
		if len(missing) == 0 {
			continue
		}
		if awaited == nil {
			awaited = slices.Clone(nodes)
		}
		awaited[i] = nodefacts.AwaitingDevices(node, missing)
	}
	if awaited == nil {
		return nodes
	}
	return awaited
}

// templateDrivers are the drivers of the devices the template node of
// group describes; none when it describes none, or when it cannot be
// read, which the group's template reports when a scale-up needs it.
func templateDrivers(ctx context.Context, group nodegroups.NodeGroup) sets.Set[string] {
	drivers := sets.New[string]()
	node, err := group.TemplateNode(ctx)
	if err != nil {
		return drivers
	}
	if devices, err := snapshot.TemplateDevicesOf(node); err == nil && devices.Count > 0 {
		drivers.Insert(devices.Driver)
	}
	return drivers
}
