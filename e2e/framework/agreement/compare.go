package agreement

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
)

// Disagreement is a pod and a node that kube-scheduler and the simulator
// judge differently.
type Disagreement struct {
	Pod  *corev1.Pod
	Node string
	// SchedulerFits is kube-scheduler's verdict: the node passed its filters.
	SchedulerFits bool
	// SimulatorReasons are why the simulator found the pod does not fit;
	// empty when it fits.
	SimulatorReasons []string
	// SchedulerMessage is the message of the pod's PodScheduled condition.
	SchedulerMessage string
	// Known is the known difference that explains it; nil when none does.
	Known *KnownDifference
}

func (d Disagreement) String() string {
	verdict := func(fits bool) string {
		if fits {
			return "fits"
		}
		return "does not fit"
	}
	explained := "UNEXPLAINED"
	if d.Known != nil {
		explained = "known difference: " + d.Known.Name
	}
	return fmt.Sprintf("pod %s/%s on node %s: kube-scheduler: %s; simulator: %s (%s); kube-scheduler said %q; %s",
		d.Pod.Namespace, d.Pod.Name, d.Node, verdict(d.SchedulerFits), verdict(!d.SchedulerFits),
		strings.Join(d.SimulatorReasons, ", "), d.SchedulerMessage, explained)
}

// KnownDifference is a way the simulator knowingly differs from
// kube-scheduler. docs/simulation.md lists them too.
type KnownDifference struct {
	Name string
	// Why the simulator differs.
	Why string
	// Explains tells whether the difference explains a disagreement.
	Explains func(Disagreement) bool
}

// KnownDifferences are the known differences, checked in order.
var KnownDifferences = []KnownDifference{}

// feasibility is what kube-scheduler decided for one pod.
type feasibility interface {
	feasibleNodes(uid types.UID) ([]string, bool)
}

// compare checks pod against every node with the simulator and records
// where it disagrees with kube-scheduler.
func compare(result *Result, sim *simulator.Scheduler, nodes []string, pod *corev1.Pod, scheduler feasibility) {
	feasible, _ := scheduler.feasibleNodes(pod.UID)
	theirs := sets.New(feasible...)
	message := ""
	if condition := scheduledCondition(pod); condition != nil {
		message = condition.Message
	}
	withClaims := hasClaims(pod)
	if withClaims {
		result.ClaimPods++
	}
	for _, node := range nodes {
		result.Pairs++
		schedulerFits := theirs.Has(node)
		if schedulerFits {
			result.FeasiblePairs++
		}
		if withClaims {
			result.ClaimPairs++
			if schedulerFits {
				result.FeasibleClaimPairs++
			}
		}
		reasons := sim.Check(pod, node)
		if schedulerFits == (reasons == nil) {
			continue
		}
		d := Disagreement{Pod: pod, Node: node, SchedulerFits: schedulerFits, SimulatorReasons: reasons, SchedulerMessage: message}
		for i := range KnownDifferences {
			if KnownDifferences[i].Explains(d) {
				d.Known = &KnownDifferences[i]
				break
			}
		}
		result.Disagreements = append(result.Disagreements, d)
	}
}
