// Package controllers reconciles the objects of the simulated provider
// (e2e/framework/infrastructure): SimClusters are provisioned at once,
// SimControlPlanes point their Cluster at the local stack's workload API
// server, SimMachines become kwok Nodes (or fail or hang, as their spec
// says), SimMachinePools run SimMachines as a cloud's instance group does,
// and SimMachineTemplates publish what their machines offer, for scaling
// from zero.
package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
)

const (
	// kwokNodeAnnotation hands a Node to kwok, which runs with
	// --manage-nodes-with-annotation-selector on it.
	kwokNodeAnnotation = "kwok.x-k8s.io/node"

	// waitingReason says that the machine waits for Cluster API.
	waitingReason = "WaitingForClusterAPI"

	// bootConcurrency bounds the SimMachines reconciled at once. A cloud
	// boots a burst's machines side by side and each kubelet registers its
	// Node when its boot ends; one reconcile at a time spread a burst's
	// registrations over seconds (a few API round trips each), and
	// zone-spread pods wait for the last zone's nodes.
	bootConcurrency = 20

	// waitRequeue is how often a machine that waits for Cluster API looks again.
	waitRequeue = 2 * time.Second
)

// SimMachineReconciler turns SimMachines, of Machines or of SimMachinePools,
// into kwok Nodes of their workload cluster, or fails or hangs as their spec
// says.
type SimMachineReconciler struct {
	Client    client.Client
	Workloads *WorkloadClients
	Clock     clock.PassiveClock
}

// SetupWithManager registers the reconciler.
func (r *SimMachineReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	return ctrl.NewControllerManagedBy(mgr).For(&infrav1.SimMachine{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: bootConcurrency}).
		Complete(r)
}

// Reconcile provisions or deletes one SimMachine.
func (r *SimMachineReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)

	simMachine := &infrav1.SimMachine{}
	if err := r.Client.Get(ctx, req.NamespacedName, simMachine); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !simMachine.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, simMachine)
	}

	machine, err := util.GetOwnerMachine(ctx, r.Client, simMachine.ObjectMeta)
	if err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if machine == nil {
		log.V(4).Info("Waiting for the Machine controller to set the owner reference")
		return ctrl.Result{RequeueAfter: waitRequeue}, nil
	}
	log = log.WithValues("Machine", klog.KObj(machine))
	ctx = ctrl.LoggerInto(ctx, log)

	before := simMachine.DeepCopy()
	if controllerutil.AddFinalizer(simMachine, infrav1.MachineFinalizer) {
		if err := r.Client.Patch(ctx, simMachine, client.MergeFrom(before)); err != nil {
			return ctrl.Result{}, err
		}
	}

	if ptr.Deref(simMachine.Status.Initialization.Provisioned, false) {
		return ctrl.Result{}, r.ensureNode(ctx, machine, simMachine)
	}
	if simMachine.Status.FailureReason != nil {
		return ctrl.Result{}, nil
	}

	// Bootstrap data comes from the Machine's dataSecretName, which must exist
	// before the machine can boot. An instance of a SimMachinePool boots from
	// the pool's, which the pool waited for.
	if !labels.IsMachinePoolOwned(simMachine) {
		dataSecretName := ptr.Deref(machine.Spec.Bootstrap.DataSecretName, "")
		if dataSecretName == "" {
			return ctrl.Result{RequeueAfter: waitRequeue}, r.setNotReady(ctx, simMachine, waitingReason, "Waiting for bootstrap data")
		}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: machine.Namespace, Name: dataSecretName}, &corev1.Secret{}); err != nil {
			if apierrors.IsNotFound(err) {
				return ctrl.Result{RequeueAfter: waitRequeue}, r.setNotReady(ctx, simMachine, waitingReason, fmt.Sprintf("Waiting for bootstrap data Secret %s", dataSecretName))
			}
			return ctrl.Result{}, err
		}
	}

	switch simMachine.Spec.Provisioning {
	case infrav1.ProvisioningFail:
		log.Info("Failing provisioning as the SimMachine asks")
		return ctrl.Result{}, r.setFailed(ctx, simMachine)
	case infrav1.ProvisioningHang:
		log.V(2).Info("Never finishing provisioning as the SimMachine asks")
		return ctrl.Result{}, r.setNotReady(ctx, simMachine, infrav1.ProvisioningReason, "Provisioning never finishes")
	}
	if ready := simMachine.CreationTimestamp.Add(simMachine.Spec.ProvisioningDelay.Duration); r.Clock.Now().Before(ready) {
		return ctrl.Result{RequeueAfter: ready.Sub(r.Clock.Now())}, r.setNotReady(ctx, simMachine, infrav1.ProvisioningReason, "Provisioning")
	}

	before = simMachine.DeepCopy()
	simMachine.Spec.ProviderID = providerID(simMachine)
	if err := r.Client.Patch(ctx, simMachine, client.MergeFrom(before)); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.ensureNode(ctx, machine, simMachine); err != nil {
		return ctrl.Result{}, err
	}

	before = simMachine.DeepCopy()
	simMachine.Status.Initialization.Provisioned = ptr.To(true)
	simMachine.Status.Addresses = []clusterv1.MachineAddress{{Type: clusterv1.MachineHostName, Address: simMachine.Name}}
	meta.SetStatusCondition(&simMachine.Status.Conditions, metav1.Condition{
		Type:               infrav1.ReadyCondition,
		Status:             metav1.ConditionTrue,
		Reason:             infrav1.ProvisionedReason,
		ObservedGeneration: simMachine.Generation,
	})
	if err := r.Client.Status().Patch(ctx, simMachine, client.MergeFrom(before)); err != nil {
		return ctrl.Result{}, err
	}
	log.Info("Provisioned the SimMachine", "providerID", simMachine.Spec.ProviderID)
	return ctrl.Result{}, nil
}

// ensureNode creates the machine's kwok Node unless it should never register.
func (r *SimMachineReconciler) ensureNode(ctx context.Context, machine *clusterv1.Machine, simMachine *infrav1.SimMachine) error {
	if simMachine.Spec.Provisioning == infrav1.ProvisioningNeverRegister {
		return nil
	}
	cluster, err := util.GetClusterByName(ctx, r.Client, machine.Namespace, machine.Spec.ClusterName)
	if err != nil {
		return err
	}
	workload, err := r.Workloads.Get(ctx, r.Client, cluster)
	if err != nil {
		return fmt.Errorf("getting a client of the workload cluster: %w", err)
	}
	version, err := r.kubeletVersion(ctx, machine)
	if err != nil {
		return err
	}
	node := newNode(machine, simMachine, version)
	if _, err := workload.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return fmt.Errorf("creating Node %s: %w", node.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Created the Node of the SimMachine", "Node", klog.KObj(node))
	return nil
}

// kubeletVersion is the version the machine's kubelet runs: the Machine's,
// or for a MachinePool Machine, which has none until Cluster API reads it
// from the Node, its MachinePool's.
func (r *SimMachineReconciler) kubeletVersion(ctx context.Context, machine *clusterv1.Machine) (string, error) {
	if machine.Spec.Version != "" || !labels.IsMachinePoolOwned(machine) {
		return machine.Spec.Version, nil
	}
	mp, err := util.GetMachinePoolByLabels(ctx, r.Client, machine.Namespace, machine.Labels)
	if err != nil || mp == nil {
		return "", err
	}
	return mp.Spec.Template.Spec.Version, nil
}

func (r *SimMachineReconciler) reconcileDelete(ctx context.Context, simMachine *infrav1.SimMachine) error {
	if !controllerutil.ContainsFinalizer(simMachine, infrav1.MachineFinalizer) {
		return nil
	}
	if err := r.deleteNode(ctx, simMachine); err != nil {
		return err
	}
	before := simMachine.DeepCopy()
	controllerutil.RemoveFinalizer(simMachine, infrav1.MachineFinalizer)
	return client.IgnoreNotFound(r.Client.Patch(ctx, simMachine, client.MergeFrom(before)))
}

// deleteNode deletes the machine's Node, as a cloud deletes the instance that
// runs a kubelet; the Machine controller usually deleted it already.
func (r *SimMachineReconciler) deleteNode(ctx context.Context, simMachine *infrav1.SimMachine) error {
	clusterName, ok := simMachine.Labels[clusterv1.ClusterNameLabel]
	if !ok {
		return nil
	}
	cluster, err := util.GetClusterByName(ctx, r.Client, simMachine.Namespace, clusterName)
	if err != nil {
		return client.IgnoreNotFound(err)
	}
	workload, err := r.Workloads.Get(ctx, r.Client, cluster)
	if err != nil {
		// Without a kubeconfig there is no workload cluster left to clean up.
		return client.IgnoreNotFound(err)
	}
	err = workload.CoreV1().Nodes().Delete(ctx, simMachine.Name, metav1.DeleteOptions{})
	return client.IgnoreNotFound(err)
}

func (r *SimMachineReconciler) setNotReady(ctx context.Context, simMachine *infrav1.SimMachine, reason, message string) error {
	before := simMachine.DeepCopy()
	meta.SetStatusCondition(&simMachine.Status.Conditions, metav1.Condition{
		Type:               infrav1.ReadyCondition,
		Status:             metav1.ConditionFalse,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: simMachine.Generation,
	})
	return r.Client.Status().Patch(ctx, simMachine, client.MergeFrom(before))
}

// setFailed reports a terminal failure both ways the v1beta2 contract allows:
// the Ready condition and the deprecated failureReason/failureMessage, which
// Cluster API copies to the Machine.
func (r *SimMachineReconciler) setFailed(ctx context.Context, simMachine *infrav1.SimMachine) error {
	const message = "Simulated provisioning failure"
	before := simMachine.DeepCopy()
	simMachine.Status.FailureReason = ptr.To("CreateError")
	simMachine.Status.FailureMessage = ptr.To(message)
	meta.SetStatusCondition(&simMachine.Status.Conditions, metav1.Condition{
		Type:               infrav1.ReadyCondition,
		Status:             metav1.ConditionFalse,
		Reason:             infrav1.ProvisioningFailedReason,
		Message:            message,
		ObservedGeneration: simMachine.Generation,
	})
	return r.Client.Status().Patch(ctx, simMachine, client.MergeFrom(before))
}

func providerID(simMachine *infrav1.SimMachine) string {
	return infrav1.ProviderIDPrefix + simMachine.Namespace + "/" + simMachine.Name
}

// newNode is the Node a kubelet of the machine would register: the labels
// Cluster API propagates from the Machine are there from the start, so the
// scheduler never sees the Node without them.
func newNode(machine *clusterv1.Machine, simMachine *infrav1.SimMachine, kubeletVersion string) *corev1.Node {
	spec := simMachine.Spec
	nodeLabels := labels.GetManagedLabels(machine.Labels)
	for k, v := range spec.NodeLabels {
		nodeLabels[k] = v
	}
	nodeLabels[corev1.LabelHostname] = simMachine.Name
	nodeLabels[corev1.LabelOSStable] = operatingSystem(spec)
	nodeLabels[corev1.LabelArchStable] = architecture(spec)
	if machine.Spec.FailureDomain != "" {
		nodeLabels[corev1.LabelTopologyZone] = machine.Spec.FailureDomain
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        simMachine.Name,
			Labels:      nodeLabels,
			Annotations: map[string]string{kwokNodeAnnotation: "fake"},
		},
		Spec: corev1.NodeSpec{ProviderID: spec.ProviderID, Taints: spec.NodeTaints},
		Status: corev1.NodeStatus{
			Capacity:    spec.Capacity.DeepCopy(),
			Allocatable: spec.Capacity.DeepCopy(),
			NodeInfo: corev1.NodeSystemInfo{
				Architecture:    architecture(spec),
				OperatingSystem: operatingSystem(spec),
				KubeletVersion:  kubeletVersion,
			},
		},
	}
}
