//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// SplitBurstSpecInput is the input of SplitBurstSpec.
type SplitBurstSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// Targets of the split burst (issue 27): what a user pays and waits.
const (
	splitBurstMaxNodes          = 31
	splitBurstMaxScaleUpLatency = 3 * time.Second
	splitBurstMaxRunningLatency = 10 * time.Second
)

// SplitBurstSpec shows a burst that arrives in two parts getting the nodes
// the whole burst needs, no more, as fast as one that arrives at once: 40
// pods spread over three zones, then 20 that also keep apart by host, 1.5
// cores each on 4-core nodes. A node holds two of them and at most one of
// those that keep apart, so 30 nodes suffice when the zone with 14 of the
// 40 gets 6 of the 20, and 31 whatever zone split kube-scheduler makes.
func SplitBurstSpec(ctx context.Context, inputGetter func() SplitBurstSpecInput) {
	var input SplitBurstSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "SplitBurstSpec needs a stack")
	})

	It("buys the nodes of the whole burst once, and runs every pod as soon as the first machines are ready", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		z := startZonalBurst(ctx, input.Stack, input.WorkloadKubeconfig, "split-burst", 45*time.Second, 60)
		namespace, cluster, groups, ca, burst, stopWatching, steps, burstStarted := z.namespace, z.cluster, z.groups, z.ca, z.burst, z.stopWatching, z.steps, z.started

		By("Creating 40 pods spread over the zones, then 20 more that also keep apart by host")
		web := framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "web", Replicas: 40, Requests: framework.CPURequest("1500m"),
			NodeSelector: map[string]string{framework.ClusterLabel: cluster.Name}, Mutate: framework.SpreadOverZones,
		})
		cache := framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "cache", Replicas: 20, Requests: framework.CPURequest("1500m"),
			NodeSelector: map[string]string{framework.ClusterLabel: cluster.Name},
			Mutate: func(template *corev1.PodTemplateSpec) {
				framework.SpreadOverZones(template)
				template.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
						TopologyKey: corev1.LabelHostname, LabelSelector: &metav1.LabelSelector{MatchLabels: template.Labels},
					}},
				}}
			},
		})

		By("Seeing every pod Running")
		framework.WaitForPodsRunning(ctx, workload, web, framework.ScaleUpTimeout)
		framework.WaitForPodsRunning(ctx, workload, cache, framework.ScaleUpTimeout)

		By(fmt.Sprintf("Seeing at most %d nodes, for good", splitBurstMaxNodes))
		nodes := 0
		Consistently(func(g Gomega) {
			nodes = len(framework.ClusterNodes(ctx, g, workload, cluster))
			g.Expect(nodes).To(BeNumerically("<=", splitBurstMaxNodes), "nodes of the cluster")
			replicas := int32(0)
			for _, md := range groups {
				replicas += framework.Replicas(ctx, g, mgmt, md)
			}
			g.Expect(replicas).To(BeNumerically("<=", splitBurstMaxNodes), "replicas of the node groups")
		}, 10*time.Second, framework.AutoscalerPoll).Should(Succeed())

		stopWatching()
		times := burst.Times()
		report := fmt.Sprintf("%d nodes; %s", nodes, times)
		AddReportEntry("split burst", report)
		GinkgoWriter.Println("Split burst:", report)
		nodeSteps, podSteps := steps.Steps()
		readyToRunning := framework.NewReadyToRunningReport(nodeSteps, podSteps, burstStarted)
		AddReportEntry("split burst: from node Ready to pod Running", readyToRunning.String())
		GinkgoWriter.Println("Split burst, from node Ready to pod Running:\n" + readyToRunning.String())
		Expect(times.FirstUnschedulable.IsZero() || times.FirstScaleUp.IsZero() || times.FirstNodeReady.IsZero() || times.AllRunning.IsZero()).
			To(BeFalse(), "the watch saw every moment: %s", times)
		Expect(times.FirstScaleUp.Sub(times.FirstUnschedulable)).To(BeNumerically("<=", splitBurstMaxScaleUpLatency),
			"first scale-up after the first pod turned unschedulable")
		Expect(times.AllRunning.Sub(times.FirstNodeReady)).To(BeNumerically("<=", splitBurstMaxRunningLatency),
			"every pod Running after the first new node was Ready")

		framework.DeleteClusterAutoscaler(ctx, mgmt, ca)
	})
}

// burstWatchInput is the input of watchBurst.
type burstWatchInput struct {
	Management, Workload client.Client
	Namespace            string
	Groups               []*clusterv1.MachineDeployment
	// NodesBefore are the nodes the burst did not add.
	NodesBefore sets.Set[string]
	// Pods the burst has in all.
	Pods int
}

// burstTimes are the moments a user feels in a burst, as one watcher saw
// them, so that their differences share a clock and a resolution.
type burstTimes struct {
	FirstUnschedulable time.Time
	FirstScaleUp       time.Time
	FirstNodeReady     time.Time
	AllRunning         time.Time
}

func (t burstTimes) String() string {
	since := func(later time.Time) string {
		if later.IsZero() || t.FirstUnschedulable.IsZero() {
			return "never"
		}
		return later.Sub(t.FirstUnschedulable).Round(100 * time.Millisecond).String()
	}
	return fmt.Sprintf("after the first pod turned unschedulable: first scale-up %s, first new node Ready %s, every pod Running %s",
		since(t.FirstScaleUp), since(t.FirstNodeReady), since(t.AllRunning))
}

// burstWatch records burstTimes by polling, until its context ends.
type burstWatch struct {
	mu    sync.Mutex
	times burstTimes
}

// Times returns what the watch saw so far.
func (w *burstWatch) Times() burstTimes {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.times
}

// watchBurst polls every 100ms the pods, nodes and node groups of a burst.
func watchBurst(ctx context.Context, input burstWatchInput) *burstWatch {
	w := &burstWatch{}
	replicasBefore := int32(len(input.Groups))
	record := func(at *time.Time, now time.Time, happened bool) {
		if happened && at.IsZero() {
			*at = now
		}
	}
	go func() {
		defer GinkgoRecover()
		wait.UntilWithContext(ctx, func(ctx context.Context) {
			now := time.Now()
			pods := &corev1.PodList{}
			nodes := &corev1.NodeList{}
			if input.Workload.List(ctx, pods, client.InNamespace(input.Namespace)) != nil || input.Workload.List(ctx, nodes) != nil {
				return
			}
			unschedulable, running := false, 0
			for _, pod := range pods.Items {
				for _, condition := range pod.Status.Conditions {
					if condition.Type == corev1.PodScheduled && condition.Reason == corev1.PodReasonUnschedulable {
						unschedulable = true
					}
				}
				if pod.Status.Phase == corev1.PodRunning {
					running++
				}
			}
			newNodeReady := false
			for _, node := range nodes.Items {
				if input.NodesBefore.Has(node.Name) {
					continue
				}
				for _, condition := range node.Status.Conditions {
					if condition.Type == corev1.NodeReady && condition.Status == corev1.ConditionTrue {
						newNodeReady = true
					}
				}
			}
			replicas := int32(0)
			for _, md := range input.Groups {
				current := &clusterv1.MachineDeployment{}
				if input.Management.Get(ctx, client.ObjectKeyFromObject(md), current) != nil {
					return
				}
				replicas += *current.Spec.Replicas
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			record(&w.times.FirstUnschedulable, now, unschedulable)
			record(&w.times.FirstScaleUp, now, replicas > replicasBefore)
			record(&w.times.FirstNodeReady, now, newNodeReady)
			record(&w.times.AllRunning, now, running == input.Pods)
		}, 100*time.Millisecond)
	}()
	return w
}

// zonalBurst is a Cluster of three zonal groups of 4-core machines at one
// node each, autoscaled, and the watches of a burst of pods to come.
type zonalBurst struct {
	namespace framework.SpecNamespace
	cluster   *clusterv1.Cluster
	groups    []*clusterv1.MachineDeployment
	ca        *autoscalingv1alpha1.ClusterAutoscaler
	burst     *burstWatch
	// stopWatching ends the burst's watch before its report.
	stopWatching context.CancelFunc
	steps        *framework.ReadyToRunning
	started      time.Time
}

// startZonalBurst creates the bursts' Cluster, whose machines take boot,
// and watches the burst of pods pods from now.
func startZonalBurst(ctx context.Context, stack *localstack.Stack, workloadKubeconfig []byte, name string, boot time.Duration, pods int) zonalBurst {
	mgmt, workload := stack.Management.Client, stack.Workload.Client
	namespace := framework.CreateSpecNamespace(ctx, stack, name)
	zones := []string{"zone-a", "zone-b", "zone-c"}
	cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{
		Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, FailureDomains: zones, WorkloadKubeconfig: workloadKubeconfig,
	})
	DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })

	By(fmt.Sprintf("Creating one MachineDeployment of 4-core machines per zone, 1 node each, machines taking %s", boot))
	machine := framework.SimMachine("4")
	machine.ProvisioningDelay = metav1.Duration{Duration: boot}
	groups := framework.CreateZonalNodeGroups(ctx, framework.CreateZonalNodeGroupsInput{
		Management: mgmt, Workload: workload, Cluster: cluster, Zones: zones,
		Replicas: 1, Annotations: framework.SizeAnnotations(1, 20), Machine: machine,
	})
	nodesBefore := framework.NodeNames(ctx, workload)
	ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: framework.FastClusterAutoscalerSpec(cluster.Name)})

	watchCtx, stopWatching := context.WithCancel(ctx)
	burst := watchBurst(watchCtx, burstWatchInput{
		Management: mgmt, Workload: workload, Namespace: namespace.Name, Groups: groups, NodesBefore: nodesBefore, Pods: pods,
	})
	DeferCleanup(stopWatching)
	return zonalBurst{
		namespace: namespace, cluster: cluster, groups: groups, ca: ca, burst: burst, stopWatching: stopWatching,
		steps:   framework.WatchReadyToRunning(ctx, stack, cluster, namespace.Name),
		started: time.Now(),
	}
}
