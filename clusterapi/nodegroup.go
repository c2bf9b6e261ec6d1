package clusterapi

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
	"github.com/capi-autoscaler/capi-autoscaler/template"
)

// member is a Machine of the group and the Node it became, if any. The
// members of a MachinePool whose infrastructure provider does not support
// MachinePool Machines have no Machine, only a provider ID.
type member struct {
	machine  *clusterv1.Machine
	node     *corev1.Node
	instance nodegroups.Instance
}

// nodeGroup is a snapshot of one scalable resource, its Machines and Nodes;
// the methods that change it re-read what they decide on.
type nodeGroup struct {
	resource scalable.Resource
	// hints are the parsed capacity annotations; hintsErr says why they
	// could not be parsed, which stops scale-ups from zero.
	hints    template.Hints
	hintsErr error
	// price is the group's price annotation; nil without a valid one.
	price *pricing.Price
	// consolidationBudget is the group's consolidation budget annotation;
	// nil without a valid one.
	consolidationBudget *intstr.IntOrString
	reader              client.Reader
	recorder            EventRecorder
	members             []member
	rolloutReason       string
}

var _ nodegroups.NodeGroup = &nodeGroup{}

type nodeGroupOptions struct {
	resource scalable.Resource
	hints    template.Hints
	hintsErr error
	price    *pricing.Price
	// consolidationBudget is the group's own consolidation budget, if any.
	consolidationBudget *intstr.IntOrString
	// reader reads infrastructure templates in the management cluster,
	// each read within a bound of its own.
	reader   client.Reader
	recorder EventRecorder
	nodes    *nodeIndex
	// listed are the MachineSets and Machines of the listing the group
	// is built in; the group's later reads use the resource's reader.
	listed *scalable.Listed
}

func newNodeGroup(ctx context.Context, opts nodeGroupOptions) (*nodeGroup, error) {
	listing := opts.resource.WithListed(opts.listed)
	machines, err := listing.Machines(ctx)
	if err != nil {
		return nil, err
	}
	rolloutReason, err := listing.RolloutReason(ctx)
	if err != nil {
		return nil, err
	}
	providerIDs, err := opts.resource.ProviderIDs(ctx)
	if err != nil {
		return nil, err
	}
	group := &nodeGroup{resource: opts.resource, hints: opts.hints, hintsErr: opts.hintsErr, price: opts.price, consolidationBudget: opts.consolidationBudget, reader: opts.reader, recorder: opts.recorder, rolloutReason: rolloutReason}
	sort.Slice(machines, func(i, j int) bool { return machines[i].Name < machines[j].Name })
	for _, machine := range machines {
		node := opts.nodes.nodeFor(machine)
		group.members = append(group.members, member{machine: machine, node: node, instance: instanceFor(machine, node)})
	}
	group.members = append(group.members, machinelessMembers(providerIDs, group.members, opts.nodes)...)
	return group, nil
}

func (g *nodeGroup) ID() string                     { return g.resource.ID() }
func (g *nodeGroup) MinSize() int                   { return g.resource.MinSize() }
func (g *nodeGroup) MaxSize() int                   { return g.resource.MaxSize() }
func (g *nodeGroup) TargetSize() int                { return g.resource.Replicas() }
func (g *nodeGroup) ScaleDownBlockedReason() string { return g.rolloutReason }
func (g *nodeGroup) Labels() map[string]string      { return g.resource.Labels() }

// WithMinSize applies rule to the group's resource, whose reads afresh
// before a decrease of the replicas apply it too.
func (g *nodeGroup) WithMinSize(rule nodegroups.MinSizeRule) nodegroups.NodeGroup {
	with := *g
	with.resource = g.resource.WithMinSize(rule)
	return &with
}

// Options are the overrides of the group's autoscaling-options annotations
// and the price and consolidation budget of its annotations.
func (g *nodeGroup) Options() nodegroups.GroupOptions {
	options := g.resource.Options()
	options.Price = g.price
	options.ConsolidationBudget = g.consolidationBudget
	return options
}

func (g *nodeGroup) Instances() []nodegroups.Instance {
	instances := make([]nodegroups.Instance, 0, len(g.members))
	for _, m := range g.members {
		instances = append(instances, m.instance)
	}
	return instances
}

// TemplateNode builds a node from the capacity the group publishes; the
// engine copies a real member instead when the group has one. An
// infrastructure template that could not be read, or that publishes what
// is not a capacity, is a *nodegroups.ReadError; one that publishes no
// capacity is an answer.
func (g *nodeGroup) TemplateNode(ctx context.Context) (*corev1.Node, error) {
	if g.hintsErr != nil {
		return nil, fmt.Errorf("cannot scale from zero: %w", g.hintsErr)
	}
	node, err := template.FromZero(ctx, g.reader, g.resource, g.hints)
	var cannot *template.CannotScaleFromZeroError
	if err != nil && !errors.As(err, &cannot) {
		return nil, &nodegroups.ReadError{Err: err}
	}
	return node, err
}

// IncreaseSize raises the replicas, unless a removal the autoscaler asked
// for is still pending: its Machine marked and the replicas lowered, but
// Cluster API not deleting it yet. Raising them then would give Cluster
// API the Machine back instead of a new one, drained and tainted, and
// lose the removal; the refusal lasts until Cluster API starts deleting
// it, within a reconcile.
func (g *nodeGroup) IncreaseSize(ctx context.Context, delta int) error {
	if delta <= 0 {
		return fmt.Errorf("%s: size increase must be positive, got %d", g.ID(), delta)
	}
	machines, existing, err := g.existingInstances(ctx)
	if err != nil {
		return err
	}
	var pending []string
	for _, machine := range notDeleting(machines) {
		if scalable.IsMarkedByAutoscaler(machine) {
			pending = append(pending, machine.Name)
		}
	}
	_, err = g.resource.UpdateReplicas(ctx, func(current int) (int, error) {
		if current < existing && len(pending) > 0 {
			return 0, &nodegroups.RefusedError{Reason: fmt.Sprintf(
				"%s: not growing while the removal of Machine(s) %s is pending (replicas %d, %d instances): Cluster API has yet to delete them, and growing now would keep them",
				g.ID(), strings.Join(pending, ", "), current, existing)}
		}
		return current + delta, nil
	})
	return err
}

// DecreaseTargetSize gives up replicas that have no instance yet. Lowering
// the replicas below the number of instances would let Cluster API or the
// infrastructure provider pick which existing ones to remove, so that is
// refused.
func (g *nodeGroup) DecreaseTargetSize(ctx context.Context, delta int) error {
	if delta <= 0 {
		return fmt.Errorf("%s: size decrease must be positive, got %d", g.ID(), delta)
	}
	_, existing, err := g.existingInstances(ctx)
	if err != nil {
		return err
	}
	_, err = g.resource.UpdateReplicas(ctx, func(current int) (int, error) {
		if current-delta < existing {
			return 0, fmt.Errorf("%s: refusing to lower replicas from %d by %d: %d instances exist, and only replicas without an instance can be given up",
				g.ID(), current, delta, existing)
		}
		return current - delta, nil
	})
	return err
}

func (g *nodeGroup) CheckScaleDown(ctx context.Context, removing int) error {
	return asRefusal(g.resource.CheckScaleDown(ctx, removing))
}

// asRefusal turns the refusals of scalable (not scalable now, out of its
// bounds, bad annotations) into a *nodegroups.RefusedError, so that the
// engine tells a removal that no longer holds from one that failed.
func asRefusal(err error) error {
	var notScalable *scalable.NotScalableError
	var outOfBounds *scalable.OutOfBoundsError
	var annotation *scalable.AnnotationError
	if errors.As(err, &notScalable) || errors.As(err, &outOfBounds) || errors.As(err, &annotation) {
		return &nodegroups.RefusedError{Reason: err.Error(), Err: err}
	}
	return err
}

// CancelDeletion removes the autoscaler's marks from the Machines of the
// nodes, read afresh, unless Cluster API is deleting them already. Nodes
// without a Machine have no mark to remove.
func (g *nodeGroup) CancelDeletion(ctx context.Context, nodes []*corev1.Node) error {
	machines, err := g.resource.Machines(ctx)
	if err != nil {
		return err
	}
	byName := map[string]*clusterv1.Machine{}
	for _, machine := range machines {
		byName[machine.Name] = machine
	}
	var toUnmark []*clusterv1.Machine
	for _, node := range nodes {
		m := g.memberForNode(node)
		if m == nil || m.machine == nil {
			continue
		}
		if machine := byName[m.machine.Name]; machine != nil && machine.DeletionTimestamp.IsZero() {
			toUnmark = append(toUnmark, machine)
		}
	}
	return g.unmark(ctx, toUnmark)
}

func (g *nodeGroup) DeleteNodes(ctx context.Context, nodes []*corev1.Node) error {
	var machines []string
	var machineless []*member
	var errs []error
	for _, node := range nodes {
		m := g.memberForNode(node)
		switch {
		case m == nil:
			errs = append(errs, fmt.Errorf("node %s does not belong to %s", node.Name, g.ID()))
		case m.machine == nil:
			machineless = append(machineless, m)
		default:
			machines = append(machines, m.machine.Name)
		}
	}
	if len(errs) > 0 {
		return kerrors.NewAggregate(errs)
	}
	if len(machineless) == 0 {
		return g.deleteMachines(ctx, machines)
	}
	if g.hasMachines() {
		// The provider supports MachinePool Machines: these instances are
		// only waiting for theirs.
		return fmt.Errorf("%s: %d of the nodes have no MachinePool Machine yet to mark for deletion; retry once Cluster API created it", g.ID(), len(machineless))
	}
	return g.deleteWithoutMachines(ctx, machineless)
}

// RemovesChosenInstances is false for a MachinePool none of whose
// instances has a Machine: its provider does not support MachinePool
// Machines (deleteWithoutMachines), or, at zero, it cannot tell yet.
func (g *nodeGroup) RemovesChosenInstances() bool {
	return g.resource.Kind() != scalable.KindMachinePool || g.hasMachines()
}

func (g *nodeGroup) hasMachines() bool {
	for _, m := range g.members {
		if m.machine != nil {
			return true
		}
	}
	return false
}

func (g *nodeGroup) DeleteInstances(ctx context.Context, instances []nodegroups.Instance) error {
	var machines []string
	var errs []error
	for _, instance := range instances {
		m := g.memberForInstance(instance.ID)
		switch {
		case m == nil:
			errs = append(errs, fmt.Errorf("instance %s does not belong to %s", instance.ID, g.ID()))
		case m.machine == nil:
			errs = append(errs, fmt.Errorf("instance %s of %s has no Machine to delete; only its infrastructure provider can remove it", instance.ID, g.ID()))
		case m.node != nil:
			errs = append(errs, fmt.Errorf("instance %s of %s has registered node %s, which must be deleted as a node", instance.ID, g.ID(), m.node.Name))
		default:
			machines = append(machines, m.machine.Name)
		}
	}
	if len(errs) > 0 {
		return kerrors.NewAggregate(errs)
	}
	return g.deleteMachines(ctx, machines)
}

func (g *nodeGroup) memberForNode(node *corev1.Node) *member {
	for i := range g.members {
		m := &g.members[i]
		if m.node != nil && m.node.Name == node.Name && compatibleProviderIDs(m.node.Spec.ProviderID, node.Spec.ProviderID) {
			return m
		}
	}
	return nil
}

func (g *nodeGroup) memberForInstance(id string) *member {
	for i := range g.members {
		if g.members[i].instance.ID == id {
			return &g.members[i]
		}
	}
	return nil
}

// deleteMachines removes exactly the named Machines, the way Cluster API
// expects: mark them with the delete-machine annotation, then lower the
// replicas once for the batch, so that the MachineSet controller removes the
// marked Machines first. If lowering fails, the marks are removed again.
func (g *nodeGroup) deleteMachines(ctx context.Context, names []string) error {
	log := ctrl.LoggerFrom(ctx).WithValues("nodeGroup", g.ID())
	// Checked on the group as it is now, before anything is marked; the
	// write of the replicas checks again, on what it writes over. During a
	// rollout, lowering a MachineDeployment's replicas may scale down a
	// MachineSet other than the one of the marked Machines.
	if err := g.resource.CheckScaleDown(ctx, len(names)); err != nil {
		return asRefusal(err)
	}
	machines, existing, err := g.existingInstances(ctx)
	if err != nil {
		return err
	}
	requested := map[string]bool{}
	for _, name := range names {
		requested[name] = true
	}
	var batch []*clusterv1.Machine
	othersMarked := 0
	for _, machine := range notDeleting(machines) {
		_, marked := machine.Annotations[clusterv1.DeleteMachineAnnotation]
		switch {
		case requested[machine.Name]:
			batch = append(batch, machine)
		case marked:
			othersMarked++
		}
	}
	if len(batch) < len(names) {
		log.V(2).Info("Some Machines are already being deleted or gone", "requested", len(names), "toDelete", len(batch))
	}
	if len(batch) == 0 {
		return nil
	}

	// Marks that were there before are not ours to remove on failure.
	var marked []*clusterv1.Machine
	alreadyMarked := 0
	for _, machine := range batch {
		if _, ok := machine.Annotations[clusterv1.DeleteMachineAnnotation]; ok {
			alreadyMarked++
			continue
		}
		if err := g.resource.MarkMachineForDeletion(ctx, machine); err != nil {
			return errors.Join(err, g.unmark(ctx, marked))
		}
		marked = append(marked, machine)
	}
	_, err = g.resource.UpdateReplicas(ctx, func(current int) (int, error) {
		// Read afresh at the write: a mark removed since, e.g. by the sweep
		// of a new engine that took over the Cluster, would have Cluster
		// API choose which Machine goes.
		if err := g.resource.CheckMarks(ctx, batch); err != nil {
			return 0, err
		}
		// Cluster API (or for a MachinePool, its infrastructure provider)
		// removes existing-current instances on its own, marked ones first. Other marked Machines beyond that surplus could be
		// removed instead of ours, and lowering the replicas while Machines
		// are still to be created would only cancel their creation.
		surplus := existing - current
		if surplus < othersMarked {
			// The group is changing under Cluster API (a Machine being
			// replaced, e.g. remediated, or still to be created): not a
			// failure of the removal, which may be asked again later.
			return 0, &nodegroups.RefusedError{Reason: fmt.Sprintf("%s: not lowering replicas from %d: %d Machines exist besides those being deleted "+
				"and %d others are marked for deletion, so Cluster API might not remove the requested ones; retry once replicas and Machines agree",
				g.ID(), current, existing, othersMarked)}
		}
		// Requested Machines that were marked before and that the surplus
		// already covers are on their way out: lowering the replicas for
		// them again would remove one more Machine, and not a marked one.
		covered := min(alreadyMarked, surplus-othersMarked)
		return current - (len(batch) - covered), nil
	})
	if err != nil {
		return asRefusal(errors.Join(err, g.unmark(ctx, marked)))
	}
	deleted := make([]string, 0, len(batch))
	for _, machine := range batch {
		deleted = append(deleted, machine.Name)
	}
	log.V(1).Info("Deleting Machines", "machines", strings.Join(deleted, ","))
	return nil
}

// deleteWithoutMachines removes registered nodes of a MachinePool whose
// provider does not support MachinePool Machines, as the upstream
// cluster-autoscaler does: it lowers the
// replicas, and the infrastructure provider chooses which instances go,
// which may be other than the requested ones. So that lowering the replicas
// removes instances rather than cancel ones still to come, it is refused
// unless the requested nodes are still listed in spec.providerIDList and the
// replicas equal the instances listed there.
func (g *nodeGroup) deleteWithoutMachines(ctx context.Context, members []*member) error {
	providerIDs, err := g.resource.ProviderIDs(ctx)
	if err != nil {
		return err
	}
	listed := sets.New[string]()
	for _, providerID := range providerIDs {
		listed.Insert(normalizeProviderID(providerID))
	}
	nodeNames := make([]string, 0, len(members))
	for _, m := range members {
		if !listed.Has(normalizeProviderID(m.instance.ID)) {
			return fmt.Errorf("%s: node %s (%s) is no longer in spec.providerIDList, its instance is already gone or going", g.ID(), m.node.Name, m.instance.ID)
		}
		nodeNames = append(nodeNames, m.node.Name)
	}
	_, err = g.resource.UpdateReplicas(ctx, func(current int) (int, error) {
		if current != listed.Len() {
			return 0, fmt.Errorf("%s: refusing to lower replicas from %d while spec.providerIDList has %d instances: the infrastructure provider might "+
				"cancel instances still to be created or removed instead; retry once replicas and instances agree", g.ID(), current, listed.Len())
		}
		return current - len(members), nil
	})
	if err != nil {
		return err
	}
	message := fmt.Sprintf("Lowered the replicas by %d for node(s) %s, which have no Machine to mark for deletion: "+
		"the infrastructure provider chooses which instance(s) to remove, as with the upstream cluster-autoscaler, and may remove others",
		len(members), strings.Join(nodeNames, ", "))
	ctrl.LoggerFrom(ctx).Info(message, "nodeGroup", g.ID())
	if g.recorder != nil {
		g.recorder.Event(g.ID(), corev1.EventTypeWarning, ReasonDeletedWithoutMachine, message)
	}
	return nil
}

// existingInstances reads afresh the group's Machines and counts its
// instances that are not being deleted: the Machines, and for a MachinePool
// the instances in spec.providerIDList that have no Machine (yet).
func (g *nodeGroup) existingInstances(ctx context.Context) ([]*clusterv1.Machine, int, error) {
	machines, err := g.resource.Machines(ctx)
	if err != nil {
		return nil, 0, err
	}
	providerIDs, err := g.resource.ProviderIDs(ctx)
	if err != nil {
		return nil, 0, err
	}
	known := sets.New[string]()
	for _, machine := range machines {
		if machine.Spec.ProviderID != "" {
			known.Insert(normalizeProviderID(machine.Spec.ProviderID))
		}
	}
	machineless := sets.New[string]()
	for _, providerID := range providerIDs {
		if normalized := normalizeProviderID(providerID); !known.Has(normalized) {
			machineless.Insert(normalized)
		}
	}
	return machines, len(notDeleting(machines)) + machineless.Len(), nil
}

// unmark removes deletion marks after a failed deletion. It runs even when
// ctx is cancelled: a mark left behind would make Cluster API remove that
// Machine at the next scale-down, whichever Machine that scale-down is for.
func (g *nodeGroup) unmark(ctx context.Context, machines []*clusterv1.Machine) error {
	ctx = context.WithoutCancel(ctx)
	var errs []error
	for _, machine := range machines {
		if err := g.resource.UnmarkMachineForDeletion(ctx, machine); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func notDeleting(machines []*clusterv1.Machine) []*clusterv1.Machine {
	var kept []*clusterv1.Machine
	for _, machine := range machines {
		if machine.DeletionTimestamp.IsZero() {
			kept = append(kept, machine)
		}
	}
	return kept
}
