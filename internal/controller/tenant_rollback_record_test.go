package controller

import (
	"encoding/json"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	provisioningv1 "github.com/capi-autoscaler/capi-autoscaler/api/provisioningrequest/v1"
	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/provisioning"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

// The status of a ProvisioningRequest is written in the workload cluster,
// where a tenant may write it too: the engine trusts only the atomic
// scale-ups it recorded in the management cluster (status.atomicScaleUps).
var _ = Describe("A ProvisioningRequest status written by a tenant", func() {
	It("names no Machine for a rollback to remove, and keeps no group from scaling down", func() {
		fixture := newWorkloadCluster(env.Config.Host)
		group := fixture.MachineDeployment("md-0", 1, map[string]string{scalable.MinSizeAnnotation: "0", scalable.MaxSizeAnnotation: "3"})
		fixture.Create(ctx, group)
		machineSet := fixture.MachineSet("md-0-a", 1, nil, group)
		fixture.Create(ctx, machineSet)
		// What a rollback removes: a Machine whose node runs no pod.
		empty := fixture.Machine("empty", machineSet)
		empty.Spec.ProviderID = "test:///" + fixture.Namespace + "/empty"
		emptyNode := fixture.Node("empty", empty.Spec.ProviderID)
		fixture.Create(ctx, empty, emptyNode)
		// The API server taints a new node not-ready; no controller here
		// takes the taint off, and scale-down would not judge it.
		untaintNode(emptyNode, corev1.TaintNodeNotReady)
		groupID := scalable.ID(scalable.KindMachineDeployment, fixture.Namespace, group.Name)

		By("a tenant writing, in the status of an atomic request, a scale-up of the group that started an hour ago and names its Machine")
		request := createRequestForAPodThatFitsNowhere(fixture.Namespace, "forged", provisioningv1.BestEffortAtomicScaleUpProvisioningClass)
		forged, err := json.Marshal(provisioning.ScaleUp{Started: time.Now().Add(-time.Hour).UTC().Truncate(time.Second),
			Groups: map[string]int{groupID: 1}, Instances: map[string][]string{groupID: {empty.Name}}})
		Expect(err).NotTo(HaveOccurred())
		// The engine answers the request and drops the scale-up from its
		// status; the tenant writes it again.
		forge := func() error {
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(request), request); err != nil {
				return err
			}
			if request.Status.ProvisioningClassDetails[provisioningv1.ScaleUpDetail] == provisioningv1.Detail(forged) {
				return nil
			}
			request.Status.ProvisioningClassDetails = map[string]provisioningv1.Detail{provisioningv1.ScaleUpDetail: provisioningv1.Detail(forged)}
			meta.SetStatusCondition(&request.Status.Conditions, metav1.Condition{Type: provisioningv1.ProvisionedCondition,
				Status: metav1.ConditionFalse, Reason: provisioningv1.ScaleUpInProgressReason, Message: "Waiting for the nodes"})
			if err := k8sClient.Status().Update(ctx, request); !apierrors.IsConflict(err) {
				return err
			}
			return nil
		}
		Expect(forge()).To(Succeed())

		key := createClusterAutoscaler(fixture)
		DeferCleanup(deleteClusterAutoscaler, key)
		expectRunning(key)

		By("the engine looping: the Machine stays unmarked, the group keeps its size, and its scale-down is not blocked")
		emptyNodeReason := func(g Gomega) string {
			configMap := &corev1.ConfigMap{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: autoscalingv1alpha1.ExplanationConfigMapName(key.Name)}, configMap)).To(Succeed())
			explanation := autoscalingv1alpha1.Explanation{}
			g.Expect(json.Unmarshal([]byte(configMap.Data[autoscalingv1alpha1.ExplanationDataKey]), &explanation)).To(Succeed())
			for _, node := range explanation.Nodes {
				if node.Name == emptyNode.Name {
					return node.Reason
				}
			}
			return ""
		}
		// Judged as a node of its group, whose scale-down may be blocked.
		Eventually(emptyNodeReason, waitTimeout).ShouldNot(Or(BeEmpty(), BeEquivalentTo(scaledown.ReasonNotStarted)))
		Consistently(func(g Gomega) {
			g.Expect(forge()).To(Succeed())
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(empty), empty)).To(Succeed())
			g.Expect(empty.Annotations).NotTo(HaveKey(clusterv1.DeleteMachineAnnotation), "the status named it")
			g.Expect(get(group).Spec.Replicas).To(HaveValue(BeEquivalentTo(1)))
			g.Expect(get(emptyNode).Spec.Taints).NotTo(ContainElement(HaveField("Key", nodefacts.ToBeDeletedTaint)))
			g.Expect(emptyNodeReason(g)).NotTo(BeEquivalentTo(scaledown.ReasonNodeGroupScaleDownBlocked), "the group is not kept from scaling down")
			g.Expect(getClusterAutoscaler(g, key).Status.AtomicScaleUps).To(BeEmpty())
		}, 5*time.Second, 250*time.Millisecond).Should(Succeed())
		Expect(getClusterAutoscaler(Default, key).Status.NodeGroups).To(ContainElement(MatchFields(IgnoreExtras, Fields{
			"ID": Equal(groupID), "TargetSize": BeEquivalentTo(1)})))
	})
})
