// Package clusterapi implements the engine's node groups with Cluster API:
// the MachineDeployments, standalone MachineSets and MachinePools of one
// Cluster that carry the autoscaler's size annotations, their Machines (and
// a MachinePool's instances without one) and the Nodes they became in the
// workload cluster.
package clusterapi

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
	"github.com/capi-autoscaler/capi-autoscaler/template"
)

// Reasons a would-be node group is not autoscaled.
const (
	ReasonInvalidAnnotation = "InvalidAnnotation"
	ReasonPaused            = "Paused"
	ReasonDeleting          = "Deleting"
)

// ReasonInvalidPrice is the reason of the problem of a group whose price
// annotation is not a price: the group is autoscaled, priced as a group
// without the annotation. A reason of its own, so that it is told apart
// from a bad capacity annotation of the same group.
const ReasonInvalidPrice = "InvalidPriceAnnotation"

// ReasonInvalidConsolidationBudget is the reason of the problem of a group
// whose consolidation budget annotation is no budget: the group is
// autoscaled, consolidated within the ClusterAutoscaler's budget.
const ReasonInvalidConsolidationBudget = "InvalidConsolidationBudgetAnnotation"

// ReasonDeletedWithoutMachine is the reason of the Warning event recorded
// when nodes of a MachinePool without MachinePool Machines are removed by
// lowering its replicas, leaving the choice of instances to its provider.
const ReasonDeletedWithoutMachine = "DeletedWithoutMachine"

// EventRecorder records an event on the object behind a node group, named
// by the group's ID.
type EventRecorder interface {
	Event(groupID, eventType, reason, message string)
}

// Options configure a Provider.
type Options struct {
	// Management reads and writes the Cluster API objects in the management
	// cluster, usually through a cache.
	Management client.Client
	// ManagementAPIReader reads from the management cluster's API server,
	// without a cache, what a change of replicas or a deletion mark
	// decides on; Management when nil.
	ManagementAPIReader client.Reader
	// Workload reads the Nodes of the workload cluster.
	Workload client.Reader
	// Cluster is the namespace and name of the Cluster.
	Cluster types.NamespacedName
	// Clock stamps deletion marks; the real clock when nil.
	Clock clock.PassiveClock
	// Owner is the UID of the ClusterAutoscaler whose engine the node
	// groups serve: the deletion marks they place name it, and they remove
	// only its marks. Required.
	Owner types.UID
	// Recorder, when set, records what a node group does that a user should
	// know of, on the object behind it.
	Recorder EventRecorder
	// TemplateReadTimeout bounds each read of a node group's infrastructure
	// template for scale from zero; DefaultTemplateReadTimeout when zero.
	TemplateReadTimeout time.Duration
}

// Provider discovers the node groups of one Cluster.
type Provider struct {
	management client.Client
	apiReader  client.Reader
	workload   client.Reader
	// writes are the replicas the engine wrote, across discoveries.
	writes *scalable.Writes
	// templates reads the groups' infrastructure templates, remembering
	// across discoveries the kinds that did not answer.
	templates *templateReader
	cluster   types.NamespacedName
	clock     clock.PassiveClock
	recorder  EventRecorder
	owner     types.UID
}

var _ nodegroups.Provider = &Provider{}

// NewProvider returns the Provider of the node groups of one Cluster.
func NewProvider(opts Options) *Provider {
	p := &Provider{management: opts.Management, apiReader: opts.ManagementAPIReader, workload: opts.Workload, cluster: opts.Cluster,
		clock: opts.Clock, recorder: opts.Recorder, owner: opts.Owner, writes: scalable.NewWrites()}
	if p.clock == nil {
		p.clock = clock.RealClock{}
	}
	p.templates = newTemplateReader(opts.Management, opts.TemplateReadTimeout, p.clock)
	return p
}

// NodeGroups reads the Cluster's MachineDeployments, standalone MachineSets,
// MachinePools, Machines and Nodes afresh. A resource with wrong annotations, or paused, or
// being deleted, is reported in Problems and leaves the others alone.
//
// The objects are the cache's, not copies, which at a thousand groups
// were most of an idle loop: the node groups only read them, and what
// changes an object reads it again (scalable.Resource's writes and marks).
func (p *Provider) NodeGroups(ctx context.Context) (nodegroups.List, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("Cluster", klog.KRef(p.cluster.Namespace, p.cluster.Name))
	var list nodegroups.List

	cluster := &clusterv1.Cluster{}
	if err := p.management.Get(ctx, p.cluster, cluster); err != nil {
		return list, fmt.Errorf("reading Cluster %s: %w", p.cluster, err)
	}
	candidates, machineSets, err := p.candidates(ctx)
	if err != nil {
		return list, err
	}
	machines := &clusterv1.MachineList{}
	if err := p.management.List(ctx, machines, client.InNamespace(p.cluster.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return list, fmt.Errorf("listing the Machines of Cluster %s: %w", p.cluster, err)
	}
	// Each group finds its MachineSets and Machines in these: a list per
	// group would filter every one of them, groups × objects per loop.
	listed := scalable.NewListed(machineSets, machines.Items)
	// The Nodes are only read, so they need not be copied out of the cache.
	nodes := &corev1.NodeList{}
	if err := p.workload.List(ctx, nodes, client.UnsafeDisableDeepCopy); err != nil {
		return list, fmt.Errorf("listing the Nodes of Cluster %s: %w", p.cluster, err)
	}
	index := newNodeIndex(nodes.Items)

	for _, obj := range candidates {
		resource, err := scalable.New(obj, scalable.Options{Client: p.management, APIReader: p.apiReader, Writes: p.writes, Cluster: cluster, Clock: p.clock, Owner: p.owner})
		var annotationErr *scalable.AnnotationError
		switch {
		case errors.As(err, &annotationErr):
			list.Problems = append(list.Problems, nodegroups.Problem{ID: annotationErr.ID, Reason: ReasonInvalidAnnotation, Message: annotationErr.Error()})
			continue
		case err != nil:
			return list, err
		case resource.Paused():
			list.Problems = append(list.Problems, nodegroups.Problem{ID: resource.ID(), Reason: ReasonPaused,
				Message: fmt.Sprintf("%s is not autoscaled while Cluster %s has spec.paused or it has the %q annotation", resource.ID(), p.cluster, clusterv1.PausedAnnotation)})
			continue
		case resource.Deleting():
			list.Problems = append(list.Problems, nodegroups.Problem{ID: resource.ID(), Reason: ReasonDeleting,
				Message: fmt.Sprintf("%s is being deleted", resource.ID())})
			continue
		}
		// A bad capacity annotation only matters once the group has no node
		// to copy, so the group stays autoscaled, as upstream keeps it:
		// scale-down and min size go on, and so do scale-ups while it has a
		// node. Leaving it out would stop all of that for a typo in a hint.
		if message := resource.ReplicasOverwritten(); message != "" {
			list.Problems = append(list.Problems, nodegroups.Problem{ID: resource.ID(), Reason: nodegroups.ReasonReplicasOverwritten, Kept: true, Message: message})
		}
		hints, hintsErr := template.ParseHints(resource.ID(), resource.Annotations())
		if hintsErr != nil {
			list.Problems = append(list.Problems, nodegroups.Problem{ID: resource.ID(), Reason: ReasonInvalidAnnotation, Kept: true,
				Message: hintsErr.Error() + "; the group cannot scale up from zero nodes until it is fixed"})
		}
		price, priceErr := template.ParsePrice(resource.ID(), resource.Annotations())
		if priceErr != nil {
			list.Problems = append(list.Problems, nodegroups.Problem{ID: resource.ID(), Reason: ReasonInvalidPrice, Kept: true,
				Message: priceErr.Error() + "; until it is fixed, the group's nodes cost the price of their instance type or the default for their capacity"})
		}
		budget, budgetErr := scalable.ParseConsolidationBudget(resource.ID(), resource.Annotations())
		if budgetErr != nil {
			list.Problems = append(list.Problems, nodegroups.Problem{ID: resource.ID(), Reason: ReasonInvalidConsolidationBudget, Kept: true,
				Message: budgetErr.Error() + "; until it is fixed, consolidation disrupts the group within the ClusterAutoscaler's budget"})
		}
		group, err := newNodeGroup(ctx, nodeGroupOptions{resource: resource, hints: hints, hintsErr: hintsErr, price: price, consolidationBudget: budget,
			reader: p.templates, recorder: p.recorder, nodes: index, listed: listed})
		if err != nil {
			return list, err
		}
		list.Groups = append(list.Groups, group)
	}
	for _, problem := range list.Problems {
		log.V(4).Info("Not autoscaling", "nodeGroup", problem.ID, "reason", problem.Reason, "message", problem.Message)
	}
	log.V(4).Info("Discovered node groups", "count", len(list.Groups), "problems", len(list.Problems))
	return list, nil
}

// candidates are the Cluster's MachineDeployments, standalone MachineSets and
// MachinePools that carry a size annotation. A MachineSet controlled by a
// MachineDeployment is part of the MachineDeployment's group, even though it
// inherits its annotations. It also returns every MachineSet of the
// namespace.
func (p *Provider) candidates(ctx context.Context) ([]client.Object, []clusterv1.MachineSet, error) {
	listReadOnly := []client.ListOption{client.InNamespace(p.cluster.Namespace), client.UnsafeDisableDeepCopy}
	var candidates []client.Object
	deployments := &clusterv1.MachineDeploymentList{}
	if err := p.management.List(ctx, deployments, listReadOnly...); err != nil {
		return nil, nil, fmt.Errorf("listing the MachineDeployments of Cluster %s: %w", p.cluster, err)
	}
	for i := range deployments.Items {
		md := &deployments.Items[i]
		if md.Spec.ClusterName == p.cluster.Name && scalable.HasSizeAnnotations(md.Annotations) {
			candidates = append(candidates, md)
		}
	}
	machineSets := &clusterv1.MachineSetList{}
	if err := p.management.List(ctx, machineSets, listReadOnly...); err != nil {
		return nil, nil, fmt.Errorf("listing the MachineSets of Cluster %s: %w", p.cluster, err)
	}
	for i := range machineSets.Items {
		ms := &machineSets.Items[i]
		if ms.Spec.ClusterName == p.cluster.Name && scalable.IsStandalone(ms) && scalable.HasSizeAnnotations(ms.Annotations) {
			candidates = append(candidates, ms)
		}
	}
	machinePools := &clusterv1.MachinePoolList{}
	err := p.management.List(ctx, machinePools, listReadOnly...)
	switch {
	case meta.IsNoMatchError(err):
		// A management cluster without the MachinePool CRD has none, as the
		// upstream autoscaler assumes when discovery does not list them.
		ctrl.LoggerFrom(ctx).V(4).Info("Not looking for MachinePools: the API server does not serve them")
		return candidates, machineSets.Items, nil
	case err != nil:
		return nil, nil, fmt.Errorf("listing the MachinePools of Cluster %s: %w", p.cluster, err)
	}
	for i := range machinePools.Items {
		mp := &machinePools.Items[i]
		if mp.Spec.ClusterName == p.cluster.Name && scalable.HasSizeAnnotations(mp.Annotations) {
			candidates = append(candidates, mp)
		}
	}
	return candidates, machineSets.Items, nil
}
