//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"
	_ "time/tzdata" // the spec reads its windows in Europe/Paris, as the manager does

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	capacitybufferv1beta1 "github.com/capi-autoscaler/capi-autoscaler/api/capacitybuffer/v1beta1"
	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/buffers"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// ScheduledCapacitySpecInput is the input of ScheduledCapacitySpec.
type ScheduledCapacitySpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscaler reaches the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// The windows of ScheduledCapacitySpec, from the time the first opens.
const (
	// bufferWindow is how long the buffer's window stays open; it holds
	// its room from scheduleLeadTime before.
	bufferWindow = time.Minute
	// sleepWindow is how long the dev group sleeps: its minimum is 0 from
	// the window's start to scheduleLeadTime before its end, when it is
	// raised back for its nodes to be Ready as the window closes.
	sleepWindow      = 100 * time.Second
	scheduleLeadTime = 30 * time.Second
	// scheduledMinimumSlack is how early before its lead time the spec
	// accepts the raise back: the loop that decides it reads its clock a
	// moment before the spec sees the replicas.
	scheduledMinimumSlack = 2 * time.Second
	// scheduledBootTime is how long the spec's Machines take to boot.
	scheduledBootTime = 5 * time.Second
)

// ScheduledCapacitySpec shows capacity on a schedule on the real stack: a
// scheduled CapacityBuffer holds nothing outside its window and has its
// node Ready before the window opens, so that pods created as it opens run
// at once; a node group that a scheduled minimum puts to sleep goes to 0
// through the normal scale-down and comes back, Ready, before its window
// ends. Both windows open at the same minute, in a time zone that is not
// UTC.
func ScheduledCapacitySpec(ctx context.Context, inputGetter func() ScheduledCapacitySpecInput) {
	var (
		input     ScheduledCapacitySpecInput
		mgmt      client.Client
		workload  client.Client
		namespace framework.SpecNamespace
	)

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "ScheduledCapacitySpec needs a stack")
		mgmt = input.Stack.Management.Client
		workload = input.Stack.Workload.Client
		namespace = framework.CreateSpecNamespace(ctx, input.Stack, "scheduled")
	})

	It("holds a buffer's room only around its window, and puts a group to sleep and wakes it in time", func() {
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: "scheduled", WorkloadKubeconfig: input.WorkloadKubeconfig})
		machine := infrav1.SimMachineSpec{
			Capacity: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("2"),
				corev1.ResourceMemory: resource.MustParse("4Gi"),
				corev1.ResourcePods:   resource.MustParse("110"),
			},
			ProvisioningDelay: metav1.Duration{Duration: scheduledBootTime},
		}
		pool := func(name string) map[string]string {
			return map[string]string{framework.ClusterLabel: namespace.Name, poolLabel: name}
		}
		By("Creating a group of workers (min 1) and a dev group (min 2) of 2-cpu Machines")
		workers := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client: mgmt, Cluster: cluster, Name: "workers", Annotations: framework.SizeAnnotations(1, 4), Labels: pool("workers"), Machine: machine,
		})
		dev := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client: mgmt, Cluster: cluster, Name: "dev", Replicas: ptr.To[int32](2), Annotations: framework.SizeAnnotations(2, 3), Labels: pool("dev"), Machine: machine,
		})
		framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: workers, Count: 1})
		framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: dev, Count: 2})

		paris, err := time.LoadLocation("Europe/Paris")
		Expect(err).NotTo(HaveOccurred())
		// The first whole minute that leaves the autoscaler time to show
		// that the buffer holds nothing before its lead time starts.
		opens := time.Now().Add(scheduleLeadTime + 45*time.Second).Truncate(time.Minute).Add(time.Minute).In(paris)
		cron := fmt.Sprintf("%d %d * * *", opens.Minute(), opens.Hour())
		By(fmt.Sprintf("Scheduling a buffer and a sleep of the dev group at %s (%q in Europe/Paris)", opens.Format(time.TimeOnly), cron))

		oneCPU := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}
		By("Filling the workers' node: a buffer's room needs a node of its own")
		framework.CreateWorkload(ctx, framework.WorkloadInput{Client: workload, Namespace: namespace.Name, Name: "base", Replicas: 2, Requests: oneCPU, NodeSelector: pool("workers")})
		template := &corev1.PodTemplate{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace.Name, Name: "one-cpu"},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{NodeSelector: pool("workers"), Containers: []corev1.Container{{
				Name: "app", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{Requests: oneCPU},
			}}}},
		}
		Expect(workload.Create(ctx, template)).To(Succeed())
		buffer := &capacitybufferv1beta1.CapacityBuffer{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace.Name, Name: "office-hours", Annotations: map[string]string{
				buffers.ScheduleAnnotation:         cron,
				buffers.ScheduleTimeZoneAnnotation: "Europe/Paris",
				buffers.ScheduleDurationAnnotation: bufferWindow.String(),
				buffers.ScheduleLeadTimeAnnotation: scheduleLeadTime.String(),
			}},
			Spec: capacitybufferv1beta1.CapacityBufferSpec{PodTemplateRef: &capacitybufferv1beta1.LocalObjectRef{Name: template.Name}, Replicas: ptr.To[int32](2)},
		}
		Expect(workload.Create(ctx, buffer)).To(Succeed())

		spec := framework.FastClusterAutoscalerSpec(cluster.Name)
		spec.ScheduledMinimums = []autoscalingv1alpha1.ScheduledMinimum{{
			Name: "night", NodeGroups: autoscalingv1alpha1.ScheduledNodeGroups{Names: []string{dev.Name}},
			Schedule: cron, TimeZone: "Europe/Paris", Duration: metav1.Duration{Duration: sleepWindow},
			LeadTime: &metav1.Duration{Duration: scheduleLeadTime}, MinSize: 0,
		}}
		invariants := framework.WatchInvariants(ctx, framework.WatchInvariantsInput{Stack: input.Stack, Cluster: cluster, ScheduledMinimums: spec.ScheduledMinimums})
		framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: spec})

		By("Seeing the buffer hold nothing before its lead time")
		Eventually(func(g Gomega) {
			current := &capacitybufferv1beta1.CapacityBuffer{}
			g.Expect(workload.Get(ctx, client.ObjectKeyFromObject(buffer), current)).To(Succeed())
			g.Expect(meta.FindStatusCondition(current.Status.Conditions, "autoscaling.cluster.x-k8s.io/ScheduleWindowOpen")).To(
				HaveField("Status", metav1.ConditionFalse))
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())
		Consistently(func(g Gomega) int32 { return framework.Replicas(ctx, g, mgmt, workers) },
			time.Until(opens.Add(-scheduleLeadTime))-2*time.Second, framework.AutoscalerPoll).Should(BeEquivalentTo(1),
			"the buffer holds room outside its window")

		By("Seeing the buffer's node Ready before its window opens")
		framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: workers, Count: 2})
		readyBefore := time.Until(opens)
		Expect(readyBefore).To(BeNumerically(">", 0), "the buffer's node was not Ready when its window opened")

		By("Creating 2 pods of the buffer's shape as the window opens: they run at once")
		time.Sleep(time.Until(opens))
		burst := framework.WorkloadInput{Client: workload, Namespace: namespace.Name, Name: "burst", Replicas: 2, Requests: oneCPU, NodeSelector: pool("workers")}
		running := timeBurst(ctx, workload, burst)
		Expect(running).To(BeNumerically("<", scheduledBootTime), "the pods waited for a Machine")

		By("Seeing the dev group go to sleep through the normal scale-down")
		Eventually(func(g Gomega) int32 { return framework.Replicas(ctx, g, mgmt, dev) },
			time.Until(opens.Add(sleepWindow-scheduleLeadTime)), framework.AutoscalerPoll).Should(BeZero(), "the dev group did not sleep")
		asleep := time.Since(opens)
		Expect(framework.ObjectEvents(ctx, Default, mgmt, namespace.Name, "MachineDeployment", dev.Name, autoscalingv1alpha1.ScheduledMinimumWindowOpenedReason)).NotTo(BeEmpty())

		By("Deleting the pods before the buffer's window closes")
		framework.DeleteWorkload(ctx, workload, framework.WorkloadDeployment(burst))

		By("Seeing the dev group back, Ready, before its window closes")
		Eventually(func(g Gomega) int32 { return framework.Replicas(ctx, g, mgmt, dev) },
			time.Until(opens.Add(sleepWindow)), framework.AutoscalerPoll).Should(BeEquivalentTo(2), "the dev group was not raised back before its window closed")
		Expect(time.Now()).To(BeTemporally(">=", opens.Add(sleepWindow-scheduleLeadTime-scheduledMinimumSlack)), "the dev group was raised back before its lead time")
		framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: dev, Count: 2})
		awake := time.Until(opens.Add(sleepWindow))
		Expect(awake).To(BeNumerically(">", 0), "the dev group's nodes were not Ready when its window closed")

		By("Seeing the buffer's room go through the normal scale-down once its window has closed")
		Eventually(func(g Gomega) int32 { return framework.Replicas(ctx, g, mgmt, workers) },
			time.Until(opens.Add(bufferWindow))+framework.ScaleDownTimeout, framework.AutoscalerPoll).Should(BeEquivalentTo(1), "the buffer's room was kept after its window")
		Expect(time.Now()).To(BeTemporally(">=", opens.Add(bufferWindow)), "the buffer's room was released inside its window")

		AddReportEntry("scheduled capacity", fmt.Sprintf(
			"buffer node Ready %s before its window; 2 pods Running %s after the window opened (boot %s); dev group at 0 %s into its sleep, Ready again %s before it ended",
			readyBefore.Round(time.Second), running.Round(100*time.Millisecond), scheduledBootTime, asleep.Round(time.Second), awake.Round(time.Second)))
		invariants.ExpectNoViolations()
		framework.ExpectNothingLeftBehind(ctx, framework.ExpectNothingLeftBehindInput{Stack: input.Stack, Cluster: cluster})
	})
}
