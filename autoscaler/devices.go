package autoscaler

import (
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
// than nodefacts.MaxStartupTime ago, Ready, in a group whose other members
// publish node-local devices of a driver that has published none for it
// yet. Until its drivers publish, the pods that wait for its devices wait
// for it rather than ask for another node, its template's devices stand in
// for its own, and it is neither the group's template nor removed as
// empty. Older nodes are left as they are: a driver that stops publishing
// for a running node does not make it unready.
func awaitDevices(groups []nodegroups.NodeGroup, nodes []*corev1.Node, resourceSlices []*resourceapi.ResourceSlice, now time.Time) []*corev1.Node {
	published := map[string]sets.Set[string]{}
	for _, slice := range resourceSlices {
		if node := snapshot.LocalSliceNode(slice); node != "" {
			if published[node] == nil {
				published[node] = sets.New[string]()
			}
			published[node].Insert(slice.Spec.Driver)
		}
	}
	if len(published) == 0 {
		return nodes
	}
	expected := map[string]sets.Set[string]{}
	for _, group := range groups {
		drivers := sets.New[string]()
		var members []string
		for _, instance := range group.Instances() {
			if instance.NodeName != "" {
				members = append(members, instance.NodeName)
				drivers = drivers.Union(published[instance.NodeName])
			}
		}
		if drivers.Len() == 0 {
			continue
		}
		for _, member := range members {
			expected[member] = drivers
		}
	}
	var awaited []*corev1.Node
	for i, node := range nodes {
		missing := expected[node.Name].Difference(published[node.Name])
		if missing.Len() == 0 || now.Sub(node.CreationTimestamp.Time) >= nodefacts.MaxStartupTime || !nodefacts.KubeletReady(node) {
			continue
		}
		if awaited == nil {
			awaited = slices.Clone(nodes)
		}
		awaited[i] = nodefacts.AwaitingDevices(node, sets.List(missing))
	}
	if awaited == nil {
		return nodes
	}
	return awaited
}
