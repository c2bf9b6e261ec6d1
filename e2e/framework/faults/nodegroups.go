// Package faults puts faults in the manager for tests: node groups that
// panic, as a bug in them would. The envtest suite of internal/controller
// uses it, and so does the manager in faults/manager, which the end-to-end
// suite's isolation spec runs.
package faults

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/clusterapi"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

// PanicAnnotation on a MachineDeployment, MachineSet or MachinePool makes
// the discovery of its node group panic with the annotation's value, in
// every loop, for as long as it is there.
const PanicAnnotation = "test.autoscaling.cluster.x-k8s.io/panic"

// PanickingNodeGroups are Cluster API's node groups (clusterapi.NewProvider),
// whose discovery panics while a group's resource carries PanicAnnotation.
func PanickingNodeGroups(opts clusterapi.Options) nodegroups.Provider {
	return &panickingProvider{Provider: clusterapi.NewProvider(opts), management: opts.Management}
}

type panickingProvider struct {
	nodegroups.Provider
	management client.Reader
}

func (p *panickingProvider) NodeGroups(ctx context.Context) (nodegroups.List, error) {
	list, err := p.Provider.NodeGroups(ctx)
	for _, group := range list.Groups {
		obj := scalable.EmptyObject(group.ID())
		if obj == nil || p.management.Get(ctx, client.ObjectKeyFromObject(obj), obj) != nil {
			continue
		}
		if value, ok := obj.GetAnnotations()[PanicAnnotation]; ok {
			panic(value)
		}
	}
	return list, err
}
