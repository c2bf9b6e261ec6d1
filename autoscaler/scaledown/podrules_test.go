package scaledown_test

import (
	"errors"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// TestPodRules carries the cases of the upstream cluster-autoscaler's drain
// rules on DaemonSet pods, controllers and safe-to-evict (simulator/
// drainability/rules: daemonset, safetoevict, replicated, customcontroller)
// for the pod on "idle", which has room to move to "busy": the pod moves
// (the node is drained), stays with its node (which is then empty), or
// keeps the node, for the reason given.
func TestPodRules(t *testing.T) {
	const (
		moves = "moves"
		stays = "stays"
	)
	unread := errors.New("listing ReplicaSets of the cluster: forbidden")
	tests := []struct {
		name string
		pod  []st.PodOption
		// gone: the pod's controller no longer exists; controllersError:
		// the controllers could not be read.
		gone             bool
		controllersError error
		// customControllers turns skipNodesWithCustomControllerPods off.
		customControllers bool
		// want is moves, stays, or the message of the blocking pod.
		want string
	}{
		{name: "a DaemonSet pod", pod: []st.PodOption{controlledBy("apps/v1", "DaemonSet")}, want: stays},
		{name: "a DaemonSet pod whose DaemonSet is gone", pod: []st.PodOption{controlledBy("apps/v1", "DaemonSet")}, gone: true, want: stays},
		{name: "a pod of a DaemonSet of another API group", pod: []st.PodOption{controlledBy("apps.kruise.io/v1alpha1", "DaemonSet")}, want: stays},
		{name: "a pod of a custom controller annotated daemonset-pod=true", pod: []st.PodOption{st.CustomDaemonSetPod("app")}, want: stays},
		{name: "a pod of a custom controller annotated daemonset-pod=true, the controller gone", pod: []st.PodOption{st.CustomDaemonSetPod("app")}, gone: true, want: stays},
		{name: "a pod annotated daemonset-pod=true without a controller", pod: []st.PodOption{withoutController, withPodAnnotation(snapshot.DaemonSetPodAnnotation, "true")}, want: stays},
		{
			name: "a pod of a custom controller annotated daemonset-pod=false",
			pod:  []st.PodOption{controlledBy("example.com/v1", "NodeAgent"), withPodAnnotation(snapshot.DaemonSetPodAnnotation, "false")},
			want: "NotReplicated: pod is controlled by NodeAgent app, not a built-in workload controller",
		},
		{
			name: "a pod of a custom controller without the daemonset-pod annotation",
			pod:  []st.PodOption{controlledBy("example.com/v1", "NodeAgent")},
			want: "NotReplicated: pod is controlled by NodeAgent app, not a built-in workload controller",
		},

		{name: "a pod of a ReplicationController", pod: []st.PodOption{controlledBy("v1", "ReplicationController")}, want: moves},
		{name: "a pod of a ReplicaSet", pod: []st.PodOption{controlledBy("apps/v1", "ReplicaSet")}, want: moves},
		{name: "a pod of a StatefulSet", pod: []st.PodOption{controlledBy("apps/v1", "StatefulSet")}, want: moves},
		{name: "a pod of a Job", pod: []st.PodOption{controlledBy("batch/v1", "Job")}, want: moves},
		{
			name: "a pod of a ReplicationController that is gone", pod: []st.PodOption{controlledBy("v1", "ReplicationController")}, gone: true,
			want: "NotReplicated: the pod's ReplicationController app no longer exists to recreate it",
		},
		{
			name: "a pod of a ReplicaSet that is gone", pod: []st.PodOption{controlledBy("apps/v1", "ReplicaSet")}, gone: true,
			want: "NotReplicated: the pod's ReplicaSet app no longer exists to recreate it",
		},
		{
			name: "a pod of a StatefulSet that is gone", pod: []st.PodOption{controlledBy("apps/v1", "StatefulSet")}, gone: true,
			want: "NotReplicated: the pod's StatefulSet app no longer exists to recreate it",
		},
		{
			name: "a pod of a Job that is gone", pod: []st.PodOption{controlledBy("batch/v1", "Job")}, gone: true,
			want: "NotReplicated: the pod's Job app no longer exists to recreate it",
		},
		{
			name: "a pod of a ReplicaSet when the controllers cannot be read", pod: []st.PodOption{controlledBy("apps/v1", "ReplicaSet")}, controllersError: unread,
			want: "NotReplicated: cannot tell whether the pod's ReplicaSet app still exists: listing ReplicaSets of the cluster: forbidden",
		},
		{name: "a DaemonSet pod when the controllers cannot be read", pod: []st.PodOption{controlledBy("apps/v1", "DaemonSet")}, controllersError: unread, want: stays},

		{
			name: "a pod of a custom controller", pod: []st.PodOption{controlledBy("argoproj.io/v1alpha1", "Rollout")},
			want: "NotReplicated: pod is controlled by Rollout app, not a built-in workload controller",
		},
		{
			name: "a pod of a custom controller of a built-in kind's name", pod: []st.PodOption{controlledBy("example.com/v1", "ReplicaSet")},
			want: "NotReplicated: pod is controlled by ReplicaSet app, not a built-in workload controller",
		},
		{name: "a pod of a custom controller, custom controllers allowed", pod: []st.PodOption{controlledBy("argoproj.io/v1alpha1", "Rollout")}, customControllers: true, want: moves},
		{
			name: "a pod of a custom controller that is gone, custom controllers allowed: it cannot be read, it is trusted",
			pod:  []st.PodOption{controlledBy("argoproj.io/v1alpha1", "Rollout")}, gone: true, customControllers: true, want: moves,
		},
		{
			name: "a pod of a custom controller when the controllers cannot be read, custom controllers allowed",
			pod:  []st.PodOption{controlledBy("argoproj.io/v1alpha1", "Rollout")}, controllersError: unread, customControllers: true, want: moves,
		},

		{name: "a pod without a controller", pod: []st.PodOption{withoutController}, want: "NotReplicated: pod has no controller to recreate it"},
		{name: "a pod without a controller, custom controllers allowed", pod: []st.PodOption{withoutController}, customControllers: true, want: "NotReplicated: pod has no controller to recreate it"},
		{
			name: "a pod without a controller annotated safe-to-evict=true",
			pod:  []st.PodOption{withoutController, withPodAnnotation(scaledown.SafeToEvictAnnotation, "true")}, want: moves,
		},
		{
			name: "a pod of a ReplicaSet that is gone annotated safe-to-evict=true",
			pod:  []st.PodOption{controlledBy("apps/v1", "ReplicaSet"), withPodAnnotation(scaledown.SafeToEvictAnnotation, "true")}, gone: true, want: moves,
		},
		{
			name: "a pod of a custom controller annotated safe-to-evict=true",
			pod:  []st.PodOption{controlledBy("argoproj.io/v1alpha1", "Rollout"), withPodAnnotation(scaledown.SafeToEvictAnnotation, "true")}, want: moves,
		},
		{
			name: "a pod of a ReplicaSet annotated safe-to-evict=false",
			pod:  []st.PodOption{controlledBy("apps/v1", "ReplicaSet"), withPodAnnotation(scaledown.SafeToEvictAnnotation, "false")},
			want: "NotSafeToEvictAnnotation: pod is annotated cluster-autoscaler.kubernetes.io/safe-to-evict=false",
		},
		{
			name: "a DaemonSet pod annotated safe-to-evict=false",
			pod:  []st.PodOption{controlledBy("apps/v1", "DaemonSet"), withPodAnnotation(scaledown.SafeToEvictAnnotation, "false")}, want: stays,
		},
	}
	for _, tt := range tests {
		// The controller's cache keeps pods as trim makes them: every
		// decision must be the same as on the whole pods.
		for _, cached := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/cached=%t", tt.name, cached), func(t *testing.T) {
				g := NewWithT(t)
				_, ctx := ktesting.NewTestContext(t)
				c := busyAndIdle(tt.pod...)
				c.cached = cached
				c.controllersError = tt.controllersError
				if tt.gone {
					c.gone = []string{"app"}
				}
				opts := options(func(o *scaledown.Options) { o.SkipNodesWithCustomControllerPods = !tt.customControllers })

				plan := scaledown.NewPlanner(clocktesting.NewFakeClock(st.Now)).Plan(ctx, c.snapshot(nil), opts, scaledown.Progress{})

				switch tt.want {
				case moves:
					g.Expect(names(plan.Drain)).To(Equal([]string{"idle"}), "drained: %v", plan.Kept["idle"])
				case stays:
					g.Expect(names(plan.Empty)).To(Equal([]string{"idle"}), "empty: %v", plan.Kept["idle"])
				default:
					g.Expect(plan.Kept).To(HaveKeyWithValue("idle", scaledown.Decision{
						Reason: scaledown.ReasonBlockedByPod, Message: "pod default/idle-0: " + tt.want,
					}))
				}
			})
		}
	}
}
