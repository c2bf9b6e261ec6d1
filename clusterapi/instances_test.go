package clusterapi

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	capierrors "sigs.k8s.io/cluster-api/api/deprecated/errors" //nolint:staticcheck // SA1019: tests the detection of v1beta1 Machine failures.

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
)

func TestNormalizeProviderID(t *testing.T) {
	tests := []struct {
		a, b  string
		equal bool
	}{
		{a: "aws:///us-east-1a/i-0abc", b: "aws://us-east-1a/i-0abc", equal: true},
		{a: "azure:///subscriptions/s/resourceGroups/rg/vm-0", b: "azure://subscriptions/s/resourceGroups/rg/vm-0", equal: true},
		{a: "gce://project/zone/instance", b: "gce://project//zone/instance/", equal: true},
		{a: "AWS:///us-east-1a/i-0abc", b: "aws:///us-east-1a/i-0abc", equal: true},
		{a: "aws:///us-east-1a/i-0abc", b: "aws:///us-east-1b/i-0abc", equal: false},
		{a: "docker:///cluster/node-1", b: "docker:///cluster/node-12", equal: false},
		{a: "aws:///us-east-1a/i-0abc", b: "gce:///us-east-1a/i-0abc", equal: false},
	}
	for _, tt := range tests {
		t.Run(tt.a+" "+tt.b, func(t *testing.T) {
			g := NewWithT(t)
			a, b := normalizeProviderID(tt.a), normalizeProviderID(tt.b)
			if tt.equal {
				g.Expect(a).To(Equal(b), "%q and %q normalise to the same ID", tt.a, tt.b)
			} else {
				g.Expect(a).NotTo(Equal(b), "%q and %q normalise to different IDs", tt.a, tt.b)
			}
		})
	}
}

func TestNodeFor(t *testing.T) {
	machine := func(name, providerID, nodeRef string) *clusterv1.Machine {
		m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
		m.Spec.ProviderID = providerID
		m.Status.NodeRef.Name = nodeRef
		return m
	}
	node := func(name, providerID string, annotations map[string]string) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}, Spec: corev1.NodeSpec{ProviderID: providerID}}
	}
	linked := func(namespace, machine string) map[string]string {
		return map[string]string{clusterv1.ClusterNamespaceAnnotation: namespace, clusterv1.MachineAnnotation: machine}
	}
	index := newNodeIndex([]corev1.Node{
		node("by-provider-id", "test:///zone/a", nil),
		node("by-node-ref", "test:///zone/b", nil),
		node("by-annotation", "", linked("ns", "m-annotated")),
		node("other-namespace", "", linked("other", "m-elsewhere")),
		node("contradicting", "test:///zone/x", linked("ns", "m-contradicted")),
	})

	tests := []struct {
		name    string
		machine *clusterv1.Machine
		want    string
	}{
		{name: "provider ID formatted differently", machine: machine("m-a", "test://zone/a", ""), want: "by-provider-id"},
		{name: "node ref", machine: machine("m-b", "", "by-node-ref"), want: "by-node-ref"},
		{name: "node annotations", machine: machine("m-annotated", "", ""), want: "by-annotation"},
		{name: "annotations of another namespace", machine: machine("m-elsewhere", "", ""), want: ""},
		{name: "annotations contradicted by the provider ID", machine: machine("m-contradicted", "test:///zone/y", ""), want: ""},
		{name: "no provider ID yet", machine: machine("m-new", "", ""), want: ""},
		{name: "provider ID without node", machine: machine("m-c", "test:///zone/c", ""), want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got := index.nodeFor(tt.machine)
			if tt.want == "" {
				g.Expect(got).To(BeNil())
				return
			}
			g.Expect(got).NotTo(BeNil())
			g.Expect(got.Name).To(Equal(tt.want))
		})
	}
}

func TestInstanceFor(t *testing.T) {
	created := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	machine := func(mutate func(*clusterv1.Machine)) *clusterv1.Machine {
		m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m-0", CreationTimestamp: created}}
		mutate(m)
		return m
	}
	condition := func(conditionType, reason string) metav1.Condition {
		return metav1.Condition{Type: conditionType, Status: metav1.ConditionFalse, Reason: reason, Message: "boom"}
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}, Spec: corev1.NodeSpec{ProviderID: "test:///node-0"}}

	tests := []struct {
		name    string
		machine *clusterv1.Machine
		node    *corev1.Node
		want    nodegroups.Instance
	}{
		{
			name:    "pending, no provider ID",
			machine: machine(func(*clusterv1.Machine) {}),
			want:    nodegroups.Instance{ID: "clusterapi://ns/m-0", Name: "m-0", State: nodegroups.InstanceCreating, Removable: true, Created: created.Time},
		},
		{
			name: "owned by its MachineSet",
			machine: machine(func(m *clusterv1.Machine) {
				m.OwnerReferences = []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineSet", Name: "md-0-x7k2p", Controller: ptr.To(true)}}
			}),
			want: nodegroups.Instance{ID: "clusterapi://ns/m-0", Name: "m-0", State: nodegroups.InstanceCreating, Removable: true, Created: created.Time,
				Owner: "MachineSet/md-0-x7k2p"},
		},
		{
			name:    "provisioned, node not registered",
			machine: machine(func(m *clusterv1.Machine) { m.Spec.ProviderID = "test:///node-0" }),
			want:    nodegroups.Instance{ID: "test:///node-0", Name: "m-0", State: nodegroups.InstanceCreating, Removable: true, Created: created.Time},
		},
		{
			name:    "running",
			machine: machine(func(m *clusterv1.Machine) { m.Spec.ProviderID = "test:///node-0" }),
			node:    node,
			want:    nodegroups.Instance{ID: "test:///node-0", Name: "m-0", NodeName: "node-0", State: nodegroups.InstanceRunning, Removable: true, Created: created.Time},
		},
		{
			name: "deleting",
			machine: machine(func(m *clusterv1.Machine) {
				m.DeletionTimestamp = ptr.To(created)
				m.Status.Phase = string(clusterv1.MachinePhaseFailed) //nolint:staticcheck // SA1019: tests the detection of v1beta1 Machine failures.
			}),
			want: nodegroups.Instance{ID: "clusterapi://ns/m-0", Name: "m-0", State: nodegroups.InstanceDeleting, Removable: true, Created: created.Time},
		},
		{
			name: "failed, v1beta1 failure reason",
			machine: machine(func(m *clusterv1.Machine) {
				//nolint:staticcheck // SA1019: tests the detection of v1beta1 Machine failures.
				m.Status.Deprecated = &clusterv1.MachineDeprecatedStatus{V1Beta1: &clusterv1.MachineV1Beta1DeprecatedStatus{
					FailureReason:  ptr.To(capierrors.CreateMachineError),
					FailureMessage: ptr.To("quota exceeded"),
				}}
			}),
			want: nodegroups.Instance{ID: "clusterapi://ns/m-0", Name: "m-0", State: nodegroups.InstanceCreating, Removable: true, Created: created.Time,
				Error: &nodegroups.InstanceError{Reason: "CreateError", Message: "quota exceeded"}},
		},
		{
			name: "failed, MachineHealthCheck gave up waiting for the node",
			machine: machine(func(m *clusterv1.Machine) {
				m.Spec.ProviderID = "test:///node-0"
				m.Status.Conditions = []metav1.Condition{condition(clusterv1.MachineHealthCheckSucceededCondition, clusterv1.MachineHealthCheckNodeStartupTimeoutReason)}
			}),
			want: nodegroups.Instance{ID: "test:///node-0", Name: "m-0", State: nodegroups.InstanceCreating, Removable: true, Created: created.Time,
				Error: &nodegroups.InstanceError{Reason: "NodeStartupTimeout", Message: "HealthCheckSucceeded: boom"}},
		},
		{
			// The Node will register again, or the MachineHealthCheck
			// replaces the Machine: either way the group did not fail.
			name: "node deleted, a MachineHealthCheck verdict is not a provisioning failure",
			machine: machine(func(m *clusterv1.Machine) {
				m.Spec.ProviderID = "test:///node-0"
				m.Status.Conditions = []metav1.Condition{condition(clusterv1.MachineHealthCheckSucceededCondition, clusterv1.MachineHealthCheckNodeDeletedReason)}
			}),
			want: nodegroups.Instance{ID: "test:///node-0", Name: "m-0", State: nodegroups.InstanceCreating, Removable: true, Created: created.Time},
		},
		{
			name: "failed, phase",
			machine: machine(func(m *clusterv1.Machine) {
				m.Status.Phase = string(clusterv1.MachinePhaseFailed) //nolint:staticcheck // SA1019: tests the detection of v1beta1 Machine failures.
			}),
			want: nodegroups.Instance{ID: "clusterapi://ns/m-0", Name: "m-0", State: nodegroups.InstanceCreating, Removable: true, Created: created.Time,
				Error: &nodegroups.InstanceError{Reason: "MachineFailed", Message: "Machine phase is Failed"}},
		},
		{
			name: "still provisioning, not a failure",
			machine: machine(func(m *clusterv1.Machine) {
				m.Status.Conditions = []metav1.Condition{
					condition(clusterv1.MachineInfrastructureReadyCondition, clusterv1.MachineInfrastructureNotReadyReason),
					condition(clusterv1.MachineBootstrapConfigReadyCondition, clusterv1.InternalErrorReason),
				}
			}),
			want: nodegroups.Instance{ID: "clusterapi://ns/m-0", Name: "m-0", State: nodegroups.InstanceCreating, Removable: true, Created: created.Time},
		},
		{
			// Providers retry errors they report this way: a passing cloud
			// hiccup must not delete the Machine and back the group off.
			name: "provider errors in conditions are slow provisioning, not a failure",
			machine: machine(func(m *clusterv1.Machine) {
				m.Status.Conditions = []metav1.Condition{
					condition(clusterv1.MachineInfrastructureReadyCondition, "InstanceProvisionFailed"),
					condition(clusterv1.MachineBootstrapConfigReadyCondition, "DataSecretGenerationError"),
				}
			}),
			want: nodegroups.Instance{ID: "clusterapi://ns/m-0", Name: "m-0", State: nodegroups.InstanceCreating, Removable: true, Created: created.Time},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(instanceFor(tt.machine, tt.node)).To(Equal(tt.want))
		})
	}
}
