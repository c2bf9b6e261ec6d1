package envtest

import (
	"context"
	"maps"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// Fixture builds Cluster API objects of one Cluster in a namespace of its
// own. No Cluster API controller runs in envtest: tests create the
// MachineSets and Machines a controller would, with the status they need.
// The builders return objects not yet created; Create creates them.
type Fixture struct {
	Client    client.Client
	Namespace string
	Cluster   *clusterv1.Cluster
}

// NewFixture creates a fresh namespace and a Cluster in it.
func NewFixture(ctx context.Context, c client.Client) *Fixture {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"}}
	gomega.ExpectWithOffset(1, c.Create(ctx, ns)).To(gomega.Succeed())
	f := &Fixture{Client: c, Namespace: ns.Name}
	f.Cluster = &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "workload"},
		Spec:       clusterv1.ClusterSpec{Paused: ptr.To(false)},
	}
	gomega.ExpectWithOffset(1, c.Create(ctx, f.Cluster)).To(gomega.Succeed())
	return f
}

// MachineTemplate is the template of the fixture's MachineDeployments and
// MachineSets, referring to an InfrastructureMachineTemplate called infraName.
func (f *Fixture) MachineTemplate(selector map[string]string, infraName string) clusterv1.MachineTemplateSpec {
	labels := maps.Clone(selector)
	labels[clusterv1.ClusterNameLabel] = f.Cluster.Name
	return clusterv1.MachineTemplateSpec{
		ObjectMeta: clusterv1.ObjectMeta{Labels: labels},
		Spec: clusterv1.MachineSpec{
			ClusterName: f.Cluster.Name,
			Bootstrap:   clusterv1.Bootstrap{DataSecretName: ptr.To("bootstrap-data")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: InfrastructureMachineTemplate.Group,
				Kind:     InfrastructureMachineTemplate.Kind,
				Name:     infraName,
			},
		},
	}
}

// MachineDeployment returns a MachineDeployment with the given replicas and
// annotations.
func (f *Fixture) MachineDeployment(name string, replicas int32, annotations map[string]string) *clusterv1.MachineDeployment {
	selector := map[string]string{clusterv1.MachineDeploymentNameLabel: name}
	return &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   f.Namespace,
			Name:        name,
			Labels:      map[string]string{clusterv1.ClusterNameLabel: f.Cluster.Name},
			Annotations: annotations,
		},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: f.Cluster.Name,
			Replicas:    ptr.To(replicas),
			Selector:    metav1.LabelSelector{MatchLabels: selector},
			Template:    f.MachineTemplate(selector, name),
		},
		// Its controller has seen it as created.
		Status: clusterv1.MachineDeploymentStatus{ObservedGeneration: 1},
	}
}

// MachineSet returns a MachineSet with the given replicas and annotations,
// controlled by owner unless it is nil. owner must have been created.
func (f *Fixture) MachineSet(name string, replicas int32, annotations map[string]string, owner *clusterv1.MachineDeployment) *clusterv1.MachineSet {
	selector := map[string]string{clusterv1.MachineSetNameLabel: name}
	labels := map[string]string{clusterv1.ClusterNameLabel: f.Cluster.Name}
	infraName := name
	if owner != nil {
		selector[clusterv1.MachineDeploymentNameLabel] = owner.Name
		labels[clusterv1.MachineDeploymentNameLabel] = owner.Name
		infraName = owner.Name
	}
	ms := &clusterv1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: name, Labels: labels, Annotations: annotations},
		Spec: clusterv1.MachineSetSpec{
			ClusterName: f.Cluster.Name,
			Replicas:    ptr.To(replicas),
			Selector:    metav1.LabelSelector{MatchLabels: selector},
			Template:    f.MachineTemplate(selector, infraName),
		},
	}
	if owner != nil {
		gomega.ExpectWithOffset(1, controllerutil.SetControllerReference(owner, ms, f.Client.Scheme())).To(gomega.Succeed())
	}
	return ms
}

// Machine returns a Machine controlled by the MachineSet, as the MachineSet
// controller would create it. owner must have been created.
func (f *Fixture) Machine(name string, owner *clusterv1.MachineSet) *clusterv1.Machine {
	machine := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: name, Labels: maps.Clone(owner.Spec.Template.Labels)},
		Spec:       *owner.Spec.Template.Spec.DeepCopy(),
	}
	gomega.ExpectWithOffset(1, controllerutil.SetControllerReference(owner, machine, f.Client.Scheme())).To(gomega.Succeed())
	return machine
}

// MachinePool returns a MachinePool with the given replicas and
// annotations, referring to an InfrastructureMachinePool called name.
func (f *Fixture) MachinePool(name string, replicas int32, annotations map[string]string) *clusterv1.MachinePool {
	template := f.MachineTemplate(map[string]string{}, name)
	template.Spec.InfrastructureRef.Kind = InfrastructureMachinePool.Kind
	return &clusterv1.MachinePool{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   f.Namespace,
			Name:        name,
			Labels:      map[string]string{clusterv1.ClusterNameLabel: f.Cluster.Name},
			Annotations: annotations,
		},
		Spec: clusterv1.MachinePoolSpec{
			ClusterName: f.Cluster.Name,
			Replicas:    ptr.To(replicas),
			Template:    template,
		},
	}
}

// PoolMachine returns a MachinePool Machine, as the MachinePool controller
// creates one for an instance of a pool whose provider supports them.
// owner must have been created.
func (f *Fixture) PoolMachine(name string, owner *clusterv1.MachinePool) *clusterv1.Machine {
	labels := maps.Clone(owner.Spec.Template.Labels)
	labels[clusterv1.MachinePoolNameLabel] = owner.Name
	labels[clusterv1.ClusterNameLabel] = owner.Spec.ClusterName
	machine := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: name, Labels: labels},
		Spec: clusterv1.MachineSpec{
			ClusterName: owner.Spec.ClusterName,
			Bootstrap:   clusterv1.Bootstrap{DataSecretName: ptr.To("")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: InfrastructureMachinePool.Group,
				Kind:     "TestMachinePoolMachine",
				Name:     name,
			},
		},
	}
	gomega.ExpectWithOffset(1, controllerutil.SetControllerReference(owner, machine, f.Client.Scheme())).To(gomega.Succeed())
	return machine
}

// Node returns a Ready workload cluster Node. Nodes are cluster-scoped, so
// the name is prefixed with the fixture's namespace.
func (f *Fixture) Node(name, providerID string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: f.NodeName(name)},
		Spec:       corev1.NodeSpec{ProviderID: providerID},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
}

// NodeName is the name Node gives a node called name.
func (f *Fixture) NodeName(name string) string {
	return f.Namespace + "-" + name
}

// Create creates the objects and then writes the status they were built
// with, as the controllers owning them would.
func (f *Fixture) Create(ctx context.Context, objs ...client.Object) {
	for _, obj := range objs {
		status := statusWriter(obj)
		gomega.ExpectWithOffset(1, f.Client.Create(ctx, obj)).To(gomega.Succeed())
		if status != nil {
			status()
			gomega.ExpectWithOffset(1, f.Client.Status().Update(ctx, obj)).To(gomega.Succeed())
		}
	}
}

// statusWriter saves the status of obj before Create drops it and returns a
// function that puts it back, or nil when there is no status to write.
func statusWriter(obj client.Object) func() {
	switch o := obj.(type) {
	case *clusterv1.Machine:
		status := o.Status.DeepCopy()
		return func() { o.Status = *status }
	case *clusterv1.MachineSet:
		status := o.Status.DeepCopy()
		return func() { o.Status = *status }
	case *clusterv1.MachineDeployment:
		status := o.Status.DeepCopy()
		return func() { o.Status = *status }
	case *clusterv1.MachinePool:
		status := o.Status.DeepCopy()
		return func() { o.Status = *status }
	case *corev1.Node:
		status := o.Status.DeepCopy()
		return func() { o.Status = *status }
	}
	return nil
}
