//go:build kind

package kind

import (
	"os/exec"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
)

var _ = Describe("A workload cluster from Cluster API's ClusterClass for CAPD", Label("kind"), func() {
	It("comes up with the MachineDeployment at the autoscaler's min size, its Machines Running on Docker containers", func() {
		expectProvidersRunning()
		objs, err := workloadClusterObjects(ctx, clusterctl)
		Expect(err).NotTo(HaveOccurred())
		start := time.Now()
		for _, obj := range objs {
			obj.SetNamespace(workloadClusterNamespace)
			Expect(apply(ctx, management, &obj)).To(Succeed())
		}
		DeferCleanup(func() {
			By("Deleting the workload cluster")
			cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: workloadClusterNamespace, Name: workloadClusterName}}
			Expect(ctrlclient.IgnoreNotFound(management.Delete(ctx, cluster))).To(Succeed())
			Eventually(func() error {
				return management.Get(ctx, ctrlclient.ObjectKeyFromObject(cluster), cluster)
			}).WithTimeout(5 * time.Minute).WithPolling(5 * time.Second).Should(Satisfy(apierrors.IsNotFound))
		})

		By("Waiting for the Cluster to be Available")
		Eventually(func(g Gomega) {
			cluster := &clusterv1.Cluster{}
			g.Expect(management.Get(ctx, ctrlclient.ObjectKey{Namespace: workloadClusterNamespace, Name: workloadClusterName}, cluster)).To(Succeed())
			g.Expect(cluster.Status.Conditions).To(ContainElement(And(
				HaveField("Type", clusterv1.AvailableCondition),
				HaveField("Status", metav1.ConditionTrue),
			)))
		}).WithTimeout(10 * time.Minute).WithPolling(5 * time.Second).Should(Succeed())
		AddReportEntry("workload cluster Available", time.Since(start).Round(time.Second).String())

		By("Checking the MachineDeployment: the topology's bounds, replicas at the min size, every Machine Running with a Node")
		mds := &clusterv1.MachineDeploymentList{}
		Expect(management.List(ctx, mds, ctrlclient.InNamespace(workloadClusterNamespace), ctrlclient.MatchingLabels{clusterv1.ClusterNameLabel: workloadClusterName})).To(Succeed())
		Expect(mds.Items).To(HaveLen(1))
		md := mds.Items[0]
		Expect(md.Annotations).To(HaveKeyWithValue(minSizeAnnotation, machineDeploymentMinSize))
		Expect(md.Annotations).To(HaveKeyWithValue(maxSizeAnnotation, machineDeploymentMaxSize))
		Expect(md.Spec.Replicas).To(HaveValue(BeEquivalentTo(1)))

		machines := &clusterv1.MachineList{}
		Expect(management.List(ctx, machines, ctrlclient.InNamespace(workloadClusterNamespace), ctrlclient.MatchingLabels{clusterv1.ClusterNameLabel: workloadClusterName})).To(Succeed())
		Expect(machines.Items).To(HaveLen(2), "one control plane Machine, one worker")
		for _, machine := range machines.Items {
			Expect(machine.Status.Phase).To(Equal(string(clusterv1.MachinePhaseRunning)), machine.Name)
			Expect(machine.Status.NodeRef.IsDefined()).To(BeTrue(), machine.Name)
		}

		By("Checking that CAPD runs a container for each Machine, and the load balancer")
		out, err := exec.Command("docker", "ps", "--filter", "label=io.x-k8s.kind.cluster="+workloadClusterName, "--format", "{{.Names}}").Output()
		Expect(err).NotTo(HaveOccurred())
		containers := strings.Fields(string(out))
		for _, machine := range machines.Items {
			Expect(containers).To(ContainElement(machine.Name))
		}
		Expect(containers).To(ContainElement(workloadClusterName + "-lb"))
	})
})
