package controllers

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/labels/format"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
)

// simMachineKind is the kind of a SimMachinePool's instances, for which
// Cluster API creates MachinePool Machines.
const simMachineKind = "SimMachine"

// SimMachinePoolReconciler runs the instances of SimMachinePools, as a
// cloud's instance group does: SimMachines, as many as the MachinePool's
// replicas, each provisioned by SimMachineReconciler once Cluster API has
// created its MachinePool Machine.
type SimMachinePoolReconciler struct {
	Client client.Client
}

// SetupWithManager registers the reconciler.
func (r *SimMachinePoolReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.SimMachinePool{}).
		// The instances and the replicas they follow.
		Watches(&infrav1.SimMachine{}, handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &infrav1.SimMachinePool{})).
		Watches(&clusterv1.MachinePool{}, handler.EnqueueRequestsFromMapFunc(machinePoolToSimMachinePool)).
		Complete(r)
}

// machinePoolToSimMachinePool maps a MachinePool to the SimMachinePool it
// refers to.
func machinePoolToSimMachinePool(_ context.Context, obj client.Object) []ctrl.Request {
	mp, ok := obj.(*clusterv1.MachinePool)
	if !ok {
		return nil
	}
	ref := mp.Spec.Template.Spec.InfrastructureRef
	if ref.APIGroup != infrav1.GroupVersion.Group || ref.Kind != "SimMachinePool" {
		return nil
	}
	return []ctrl.Request{{NamespacedName: client.ObjectKey{Namespace: mp.Namespace, Name: ref.Name}}}
}

// Reconcile creates or removes instances until they match the replicas, and
// publishes them.
func (r *SimMachinePoolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)

	pool := &infrav1.SimMachinePool{}
	if err := r.Client.Get(ctx, req.NamespacedName, pool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pool.DeletionTimestamp.IsZero() {
		// The instances go with the pool, through their owner references.
		return ctrl.Result{}, nil
	}
	mp, err := util.GetOwnerMachinePool(ctx, r.Client, pool.ObjectMeta)
	if err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if mp == nil {
		log.V(4).Info("Waiting for the MachinePool controller to set the owner reference")
		return ctrl.Result{RequeueAfter: waitRequeue}, nil
	}
	ctx = ctrl.LoggerInto(ctx, log.WithValues("MachinePool", klog.KObj(mp)))
	if ptr.Deref(mp.Spec.Template.Spec.Bootstrap.DataSecretName, "") == "" {
		log.V(4).Info("Waiting for the MachinePool's bootstrap data")
		return ctrl.Result{RequeueAfter: waitRequeue}, nil
	}

	instances, err := r.instances(ctx, mp)
	if err != nil {
		return ctrl.Result{}, err
	}
	desired := int(ptr.Deref(mp.Spec.Replicas, 0))
	switch {
	case len(instances) < desired:
		err = r.create(ctx, pool, mp, desired-len(instances))
	case len(instances) > desired:
		err = r.remove(ctx, instances, len(instances)-desired)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.publish(ctx, pool, instances); err != nil {
		return ctrl.Result{}, err
	}
	if len(instances) != desired {
		return ctrl.Result{RequeueAfter: waitRequeue}, nil
	}
	return ctrl.Result{}, nil
}

// instance is a SimMachine of a pool and the MachinePool Machine Cluster API
// made for it, once it has.
type instance struct {
	simMachine *infrav1.SimMachine
	machine    *clusterv1.Machine
}

// instances lists the pool's SimMachines that are not being deleted, by the
// labels Cluster API finds MachinePool Machines' infrastructure with.
func (r *SimMachinePoolReconciler) instances(ctx context.Context, mp *clusterv1.MachinePool) ([]instance, error) {
	list := &infrav1.SimMachineList{}
	if err := r.Client.List(ctx, list, client.InNamespace(mp.Namespace), client.MatchingLabels(instanceLabels(mp))); err != nil {
		return nil, err
	}
	var instances []instance
	for i := range list.Items {
		simMachine := &list.Items[i]
		if !simMachine.DeletionTimestamp.IsZero() {
			continue
		}
		machine, err := util.GetOwnerMachine(ctx, r.Client, simMachine.ObjectMeta)
		if err != nil {
			return nil, client.IgnoreNotFound(err)
		}
		instances = append(instances, instance{simMachine: simMachine, machine: machine})
	}
	return instances, nil
}

func instanceLabels(mp *clusterv1.MachinePool) map[string]string {
	return map[string]string{
		clusterv1.ClusterNameLabel:     mp.Spec.ClusterName,
		clusterv1.MachinePoolNameLabel: format.MustFormatValue(mp.Name),
	}
}

// create adds count instances made from the pool's template.
func (r *SimMachinePoolReconciler) create(ctx context.Context, pool *infrav1.SimMachinePool, mp *clusterv1.MachinePool, count int) error {
	for range count {
		simMachine := &infrav1.SimMachine{
			ObjectMeta: metav1.ObjectMeta{
				Namespace:    pool.Namespace,
				GenerateName: pool.Name + "-",
				Labels:       instanceLabels(mp),
				// The Machine controller makes the MachinePool Machine the
				// controller; until then the pool keeps the instance.
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: infrav1.GroupVersion.String(),
					Kind:       "SimMachinePool",
					Name:       pool.Name,
					UID:        pool.UID,
				}},
			},
			Spec: *pool.Spec.Template.DeepCopy(),
		}
		simMachine.Spec.ProviderID = ""
		if err := r.Client.Create(ctx, simMachine); err != nil {
			return fmt.Errorf("creating an instance of SimMachinePool %s: %w", klog.KObj(pool), err)
		}
		ctrl.LoggerFrom(ctx).Info("Created an instance", "SimMachine", klog.KObj(simMachine))
	}
	return nil
}

// remove deletes count instances by deleting their Machines, so that Cluster
// API drains their Nodes first: the instances whose Machine carries the
// delete-machine annotation, then those that never provisioned, then the
// newest. An instance whose Machine Cluster API has not created yet is left
// for a later pass, as the Machine may be on its way.
func (r *SimMachinePoolReconciler) remove(ctx context.Context, instances []instance, count int) error {
	candidates := slices.Clone(instances)
	sort.SliceStable(candidates, func(i, j int) bool {
		a, b := candidates[i], candidates[j]
		if markedA, markedB := markedForDeletion(a), markedForDeletion(b); markedA != markedB {
			return markedA
		}
		if provisionedA, provisionedB := provisioned(a), provisioned(b); provisionedA != provisionedB {
			return provisionedB
		}
		return b.simMachine.CreationTimestamp.Before(&a.simMachine.CreationTimestamp)
	})
	for _, candidate := range candidates[:count] {
		if candidate.machine == nil {
			continue
		}
		if !candidate.machine.DeletionTimestamp.IsZero() {
			continue
		}
		if err := r.Client.Delete(ctx, candidate.machine); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting Machine %s: %w", klog.KObj(candidate.machine), err)
		}
		ctrl.LoggerFrom(ctx).Info("Deleting an instance", "Machine", klog.KObj(candidate.machine), "SimMachine", klog.KObj(candidate.simMachine),
			"marked", markedForDeletion(candidate))
	}
	return nil
}

func markedForDeletion(i instance) bool {
	if i.machine == nil {
		return false
	}
	_, marked := i.machine.Annotations[clusterv1.DeleteMachineAnnotation]
	return marked
}

func provisioned(i instance) bool {
	return ptr.Deref(i.simMachine.Status.Initialization.Provisioned, false)
}

// publish writes what the InfraMachinePool contract asks: the provider IDs
// of the provisioned instances, their number, the kind of the instances,
// and what a new instance would offer.
func (r *SimMachinePoolReconciler) publish(ctx context.Context, pool *infrav1.SimMachinePool, instances []instance) error {
	var providerIDs []string
	for _, i := range instances {
		if provisioned(i) && i.simMachine.Spec.ProviderID != "" {
			providerIDs = append(providerIDs, i.simMachine.Spec.ProviderID)
		}
	}
	sort.Strings(providerIDs)
	if !slices.Equal(providerIDs, pool.Spec.ProviderIDList) {
		before := pool.DeepCopy()
		pool.Spec.ProviderIDList = providerIDs
		if err := r.Client.Patch(ctx, pool, client.MergeFrom(before)); err != nil {
			return err
		}
	}
	template := pool.Spec.Template
	before := pool.DeepCopy()
	pool.Status.Ready = true
	pool.Status.Replicas = int32(len(providerIDs))
	pool.Status.InfrastructureMachineKind = simMachineKind
	pool.Status.Capacity = template.Capacity.DeepCopy()
	pool.Status.NodeInfo = &infrav1.NodeInfo{Architecture: architecture(template), OperatingSystem: operatingSystem(template)}
	meta.SetStatusCondition(&pool.Status.Conditions, metav1.Condition{
		Type:               infrav1.ReadyCondition,
		Status:             metav1.ConditionTrue,
		Reason:             infrav1.ProvisionedReason,
		ObservedGeneration: pool.Generation,
	})
	return r.Client.Status().Patch(ctx, pool, client.MergeFrom(before))
}
