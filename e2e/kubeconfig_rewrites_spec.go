//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// KubeconfigRewritesSpecInput is the input of KubeconfigRewritesSpec.
type KubeconfigRewritesSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscaler reaches the
	// workload cluster with until the spec rewrites its Secret.
	WorkloadKubeconfig []byte
	// Manager returns the running autoscaler manager, whose log tells when
	// it started an engine; it must not exit or panic.
	Manager func() *localstack.Process
}

const (
	// kubeconfigRewriteInterval is how often the spec writes a new token
	// into the workload kubeconfig Secret, as a token refresher does.
	kubeconfigRewriteInterval = 30 * time.Second
	// rewritesUnneededTime is longer than kubeconfigRewriteInterval: an
	// engine started again at each rewrite never sees a node unneeded for
	// that long.
	rewritesUnneededTime = time.Minute
)

// KubeconfigRewritesSpec rewrites the workload kubeconfig Secret a
// ClusterAutoscaler names every 30 s with a new token of the same
// ServiceAccount, each token revoked one rewrite after it was replaced, as
// short-lived tokens refreshed before they expire are, while a scale-down
// is due: a node stays empty for longer than the unneededTime, which is
// longer than the rewrite interval. The engine must go on with each new
// token without starting again, the node must go within two unneeded
// periods, and no invariant may break.
func KubeconfigRewritesSpec(ctx context.Context, inputGetter func() KubeconfigRewritesSpecInput) {
	var input KubeconfigRewritesSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "KubeconfigRewritesSpec needs a stack")
		Expect(input.Manager).NotTo(BeNil(), "KubeconfigRewritesSpec needs the manager")
	})

	It("removes an unneeded node while its workload kubeconfig Secret is rewritten more often than the unneeded time", func() {
		mgmt := input.Stack.Management.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "kubeconfig-rewrites")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })
		invariants := framework.WatchInvariants(ctx, framework.WatchInvariantsInput{Stack: input.Stack, Cluster: cluster})
		md, _ := framework.CreateWorkerGroup(ctx, framework.CreateWorkerGroupInput{Stack: input.Stack, Cluster: cluster, Nodes: 2, MaxSize: 3})

		spec := framework.FastClusterAutoscalerSpec(cluster.Name)
		spec.ScaleDown.UnneededTime = &metav1.Duration{Duration: rewritesUnneededTime}
		kubeconfigSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace.Name, Name: spec.WorkloadKubeconfigSecretRef.Name}}
		var holders []*corev1.Secret
		// rewrite writes a token of WorkloadServiceAccount into the Secret,
		// and revokes the one that the previous rewrite replaced.
		rewrite := func() {
			holder := createTokenHolder(ctx, input.Stack.Workload.Client, fmt.Sprintf("%s-token-%d", namespace.Name, len(holders)))
			framework.PatchObject(ctx, mgmt, kubeconfigSecret, false, func(s *corev1.Secret) {
				s.Data[secret.KubeconfigDataName] = boundWorkloadKubeconfig(ctx, input.Stack, holder)
			})
			holders = append(holders, holder)
			if len(holders) >= 3 {
				Expect(client.IgnoreNotFound(input.Stack.Workload.Client.Delete(ctx, holders[len(holders)-3]))).To(Succeed())
			}
		}
		By("Writing a token that expires into the Secret that the ClusterAutoscaler will name")
		rewrite()

		By(fmt.Sprintf("Autoscaling a group of 2 empty nodes, at least 1, with an unneededTime of %s", rewritesUnneededTime))
		// The node is unneeded from the engine's first loop on, before the
		// ClusterAutoscaler is seen Ready.
		dueAt := time.Now()
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: spec})

		bound := 2 * rewritesUnneededTime
		By(fmt.Sprintf("Writing a new token into Secret %s every %s: the unneeded node goes within %s", kubeconfigSecret.Name, kubeconfigRewriteInterval, bound))
		// Half an interval in, so that the token the engine started with is
		// revoked well within the unneeded time.
		nextRewrite := dueAt.Add(kubeconfigRewriteInterval / 2)
		for framework.Replicas(ctx, Default, mgmt, md) != 1 {
			Expect(time.Since(dueAt)).To(BeNumerically("<", bound), "the unneeded node was not removed within %s, across %d rewrites: the engine started %d times",
				bound, len(holders), engineStarts(input.Manager(), ca))
			if !time.Now().Before(nextRewrite) {
				rewrite()
				nextRewrite = nextRewrite.Add(kubeconfigRewriteInterval)
			}
			time.Sleep(framework.AutoscalerPoll)
		}
		took := time.Since(dueAt)
		AddReportEntry("kubeconfig rewrites", fmt.Sprintf("%s: the unneeded node removed %s after its ClusterAutoscaler was created, across %d rewrites", input.Stack.Topology(), took.Round(time.Second), len(holders)))
		Expect(took).To(BeNumerically(">=", rewritesUnneededTime), "the node was removed before it was unneeded for %s", rewritesUnneededTime)
		Expect(len(holders)).To(BeNumerically(">=", 3), "the token the engine started with was not revoked while the node was unneeded")

		By("Seeing that the engine went on with the new credentials, without starting again")
		Expect(engineStarts(input.Manager(), ca)).To(Equal(1), "the engine started again: its unneeded timers were forgotten")
		Expect(credentialSwaps(input.Manager(), ca)).NotTo(BeZero(), "the engine never took the new credentials")
		framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: input.Stack.Workload.Client, Group: md, Count: 1})
		expectReady(ctx, mgmt, ca)

		framework.ExpectNothingLeftBehind(ctx, framework.ExpectNothingLeftBehindInput{Stack: input.Stack, Cluster: cluster})
		invariants.ExpectNoViolations()
		framework.ExpectManagerHealthy(input.Manager())
		framework.DeleteClusterAutoscaler(ctx, mgmt, ca)
	})
}
