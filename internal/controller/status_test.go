package controller

import (
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util/conditions"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/minimums"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/schedule"
)

func TestSetStatusFromLoop(t *testing.T) {
	loopTime := time.Date(2026, 3, 1, 10, 0, 0, 500, time.UTC)
	tests := []struct {
		name string
		// conditions are the ClusterAutoscaler's before.
		conditions []metav1.Condition
		status     autoscaler.Status
		expect     func(g Gomega, ca *autoscalingv1alpha1.ClusterAutoscaler)
	}{
		{
			name: "capacity buffers: why room is unplaceable, else where a scheduled buffer stands",
			status: autoscaler.Status{Time: loopTime, ClusterHealthy: true, ScalingActive: true, Buffers: []autoscaler.BufferStatus{
				{Buffer: "ns/stuck", Replicas: 2, Unplaceable: 2, Reasons: []autoscaler.ReasonCount{{Reason: "no group fits", Pods: 2}}, Schedule: "its schedule's window opened at 08:00"},
				{Buffer: "ns/night", Schedule: "outside its schedule's windows it holds no room"},
				{Buffer: "ns/always", Replicas: 1, Held: 1},
			}},
			expect: func(g Gomega, ca *autoscalingv1alpha1.ClusterAutoscaler) {
				g.Expect(ca.Status.CapacityBuffers).To(Equal([]autoscalingv1alpha1.CapacityBufferRoom{
					{Name: "ns/stuck", Replicas: 2, Unplaceable: 2, Message: "no group fits"},
					{Name: "ns/night", Message: "outside its schedule's windows it holds no room"},
					{Name: "ns/always", Replicas: 1, Held: 1},
				}))
			},
		},
		{
			name: "scheduled minimums: the windows of a group, and those ignored",
			status: autoscaler.Status{Time: loopTime, ClusterHealthy: true, ScalingActive: true,
				ScheduledMinimumProblems: []string{`scheduled minimum mars is ignored: unknown time zone "Mars/Olympus_Mons"`},
				NodeGroups: []autoscaler.NodeGroupStatus{
					{ID: "MachineDeployment/ns/dev", Autoscaled: true, MinSize: 0, MaxSize: 5, ScheduledMinimum: &minimums.Minimum{
						Selected: true, MinSize: 0, Annotated: 2,
						Active: []minimums.Active{{Name: "night", Window: schedule.Window{Opens: loopTime.Add(-time.Hour), Closes: loopTime.Add(10 * time.Hour)}}},
						Next:   &minimums.Active{Name: "office", MinSize: 4, Window: schedule.Window{Opens: loopTime.Add(24 * time.Hour), Closes: loopTime.Add(34 * time.Hour)}},
					}},
				}},
			expect: func(g Gomega, ca *autoscalingv1alpha1.ClusterAutoscaler) {
				g.Expect(conditions.Get(ca, autoscalingv1alpha1.ScheduledMinimumsValidCondition)).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.InvalidScheduledMinimumReason))
				g.Expect(conditions.Get(ca, autoscalingv1alpha1.ScheduledMinimumsValidCondition).Message).To(ContainSubstring("mars is ignored"))
				second := loopTime.Truncate(time.Second)
				g.Expect(ca.Status.NodeGroups[0].MinSize).To(HaveValue(BeEquivalentTo(0)))
				g.Expect(ca.Status.NodeGroups[0].ScheduledMinimum).To(Equal(&autoscalingv1alpha1.NodeGroupScheduledMinimum{
					AnnotatedMinSize: 2,
					Active:           []autoscalingv1alpha1.ScheduledWindow{{Name: "night", Opens: metav1.NewTime(second.Add(-time.Hour)), Closes: metav1.NewTime(second.Add(10 * time.Hour))}},
					Next:             &autoscalingv1alpha1.ScheduledWindow{Name: "office", MinSize: 4, Opens: metav1.NewTime(second.Add(24 * time.Hour)), Closes: metav1.NewTime(second.Add(34 * time.Hour))},
				}))
			},
		},
		{
			name: "a healthy loop",
			status: autoscaler.Status{
				Time: loopTime, ClusterHealthy: true, ScalingActive: true, Nodes: 3, ReadyNodes: 2, UnschedulablePods: 4,
				NodeGroups: []autoscaler.NodeGroupStatus{
					{ID: "MachineDeployment/ns/md-0", Autoscaled: true, MinSize: 1, MaxSize: 5, TargetSize: 3, Registered: 2, Ready: 2, Upcoming: 1, BackoffUntil: loopTime.Add(time.Minute), BackoffReason: "ScaleUpTimedOut"},
					{ID: "MachineDeployment/ns/md-1", Problem: "min-size is not a number"},
					{ID: "MachineDeployment/ns/max-only", Autoscaled: true, MinSize: 0, MaxSize: 3},
					{ID: "MachineDeployment/ns/bad-hint", Autoscaled: true, MinSize: 0, MaxSize: 3, Problem: "cpu is not a quantity",
						Price: pricing.Quote{PerHour: 203_832, Source: pricing.SourceDefault}},
					{ID: "MachineDeployment/ns/priced", Autoscaled: true, MaxSize: 3, Price: pricing.Quote{PerHour: 192_000, Source: pricing.SourceNodeGroup}},
					{ID: "MachineDeployment/ns/listed", Autoscaled: true, MaxSize: 3, Price: pricing.Quote{PerHour: 1_000_000, Source: pricing.SourceInstanceType}},
				},
				LastScaleUp: loopTime.Add(-time.Hour),
			},
			expect: func(g Gomega, ca *autoscalingv1alpha1.ClusterAutoscaler) {
				g.Expect(conditions.Get(ca, autoscalingv1alpha1.ReadyCondition)).To(haveStatusAndReason(metav1.ConditionTrue, autoscalingv1alpha1.RunningReason))
				g.Expect(conditions.Get(ca, autoscalingv1alpha1.ScalingActiveCondition)).To(haveStatusAndReason(metav1.ConditionTrue, autoscalingv1alpha1.RunningReason))
				g.Expect(conditions.Get(ca, autoscalingv1alpha1.ClusterHealthyCondition)).To(haveStatusAndReason(metav1.ConditionTrue, autoscalingv1alpha1.HealthyReason))
				g.Expect(ca.Status.NodeGroupCount).To(BeEquivalentTo(5), "groups with a problem that only limits them are autoscaled")
				g.Expect(ca.Status.NodeGroups).To(HaveLen(6))
				g.Expect(ca.Status.NodeGroups[0]).To(MatchFields(IgnoreExtras, Fields{
					"MinSize": HaveValue(BeEquivalentTo(1)), "MaxSize": HaveValue(BeEquivalentTo(5)),
					"TargetSize": BeEquivalentTo(3), "Upcoming": BeEquivalentTo(1), "BackoffReason": Equal("ScaleUpTimedOut"),
					"BackoffUntil": PointTo(HaveField("Time", Equal(loopTime.Add(time.Minute).Truncate(time.Second)))),
				}))
				g.Expect(ca.Status.NodeGroups[1]).To(MatchFields(IgnoreExtras, Fields{
					"Problem": Equal("min-size is not a number"), "MinSize": BeNil(), "MaxSize": BeNil(),
				}), "a group left out has no bounds")
				g.Expect(ca.Status.NodeGroups[2]).To(MatchFields(IgnoreExtras, Fields{
					"MinSize": HaveValue(BeEquivalentTo(0)), "MaxSize": HaveValue(BeEquivalentTo(3)),
				}), "the min a group without a min-size annotation is kept at")
				g.Expect(ca.Status.NodeGroups[3]).To(MatchFields(IgnoreExtras, Fields{
					"Problem": Equal("cpu is not a quantity"), "Price": Equal("0.203832"), "PriceSource": Equal(autoscalingv1alpha1.DefaultPriceSource),
				}))
				g.Expect(ca.Status.NodeGroups[4]).To(MatchFields(IgnoreExtras, Fields{"Price": Equal("0.192"), "PriceSource": Equal(autoscalingv1alpha1.NodeGroupPriceSource)}))
				g.Expect(ca.Status.NodeGroups[5]).To(MatchFields(IgnoreExtras, Fields{"Price": Equal("1"), "PriceSource": Equal(autoscalingv1alpha1.InstanceTypePriceSource)}))
				g.Expect(ca.Status.NodeGroups[0].Price).To(BeEmpty(), "no price while the engine knows none")
				g.Expect(ca.Status.Nodes).To(BeEquivalentTo(3))
				g.Expect(ca.Status.ReadyNodes).To(BeEquivalentTo(2))
				g.Expect(ca.Status.UnschedulablePods).To(BeEquivalentTo(4))
				g.Expect(ca.Status.LastScaleUpTime.Time).To(Equal(loopTime.Add(-time.Hour).Truncate(time.Second)))
				g.Expect(ca.Status.LastScaleDownTime).To(BeNil())
				g.Expect(conditions.Has(ca, autoscalingv1alpha1.AtomicScaleUpsRolledBackCondition)).To(BeFalse(), "no rollback ever gave up")
			},
		},
		{
			name:   "a loop that left pods for the next",
			status: autoscaler.Status{Time: loopTime, ClusterHealthy: true, ScalingActive: true, UnschedulablePods: 50000, PodsLeftForNextLoop: 40000},
			expect: func(g Gomega, ca *autoscalingv1alpha1.ClusterAutoscaler) {
				g.Expect(ca.Status.PodsLeftForNextLoop).To(BeEquivalentTo(40000))
				g.Expect(conditions.Get(ca, autoscalingv1alpha1.ScalingActiveCondition)).To(haveStatusAndReason(metav1.ConditionTrue, autoscalingv1alpha1.RunningReason),
					"scaling goes on")
				g.Expect(conditions.GetMessage(ca, autoscalingv1alpha1.ScalingActiveCondition)).To(Equal(
					"40000 pending pod(s) left for the next loop: more than spec.maxPendingPodsPerLoop were pending"))
			},
		},
		{
			name: "a rollback that gave up",
			status: autoscaler.Status{Time: loopTime, ClusterHealthy: true, ScalingActive: true,
				UnfinishedRollbacks: []string{"ProvisioningRequest default/job: the rollback could not remove md-0-x of MachineDeployment/ns/md-0 within 10m0s (rolling out)"}},
			expect: func(g Gomega, ca *autoscalingv1alpha1.ClusterAutoscaler) {
				g.Expect(conditions.Get(ca, autoscalingv1alpha1.AtomicScaleUpsRolledBackCondition)).To(
					haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.RollbackIncompleteReason))
				g.Expect(conditions.GetMessage(ca, autoscalingv1alpha1.AtomicScaleUpsRolledBackCondition)).To(ContainSubstring("could not remove md-0-x"))
				g.Expect(conditions.Get(ca, autoscalingv1alpha1.ScalingActiveCondition)).To(haveStatusAndReason(metav1.ConditionTrue, autoscalingv1alpha1.RunningReason),
					"scaling goes on")
			},
		},
		{
			name: "what a rollback left is gone",
			conditions: []metav1.Condition{{Type: autoscalingv1alpha1.AtomicScaleUpsRolledBackCondition, Status: metav1.ConditionFalse,
				Reason: autoscalingv1alpha1.RollbackIncompleteReason}},
			status: autoscaler.Status{Time: loopTime, ClusterHealthy: true, ScalingActive: true},
			expect: func(g Gomega, ca *autoscalingv1alpha1.ClusterAutoscaler) {
				g.Expect(conditions.Get(ca, autoscalingv1alpha1.AtomicScaleUpsRolledBackCondition)).To(
					haveStatusAndReason(metav1.ConditionTrue, autoscalingv1alpha1.RolledBackReason))
			},
		},
		{
			name:   "an unhealthy cluster",
			status: autoscaler.Status{Time: loopTime, HealthMessage: "5 of 6 nodes are unready", ScalingMessage: "Cluster is unhealthy", NodeGroups: []autoscaler.NodeGroupStatus{{ID: "MachineDeployment/ns/md-0", Autoscaled: true}}},
			expect: func(g Gomega, ca *autoscalingv1alpha1.ClusterAutoscaler) {
				g.Expect(conditions.Get(ca, autoscalingv1alpha1.ScalingActiveCondition)).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.ClusterUnhealthyReason))
				g.Expect(conditions.Get(ca, autoscalingv1alpha1.ClusterHealthyCondition)).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.ClusterUnhealthyReason))
				g.Expect(conditions.GetMessage(ca, autoscalingv1alpha1.ClusterHealthyCondition)).To(Equal("5 of 6 nodes are unready"))
			},
		},
		{
			name: "another cluster autoscaler acting",
			status: autoscaler.Status{Time: loopTime, ClusterHealthy: true, OtherAutoscaler: "Lease kube-system/cluster-autoscaler was renewed at 2026-01-01T12:00:00Z",
				ScalingMessage: "Another cluster autoscaler acts on the cluster", NodeGroups: []autoscaler.NodeGroupStatus{{ID: "MachineDeployment/ns/md-0", Autoscaled: true}}},
			expect: func(g Gomega, ca *autoscalingv1alpha1.ClusterAutoscaler) {
				g.Expect(conditions.Get(ca, autoscalingv1alpha1.ScalingActiveCondition)).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.OtherAutoscalerActiveReason))
				g.Expect(conditions.GetMessage(ca, autoscalingv1alpha1.ScalingActiveCondition)).To(Equal("Another cluster autoscaler acts on the cluster"))
			},
		},
		{
			name:   "no node groups",
			status: autoscaler.Status{Time: loopTime, ClusterHealthy: true, ScalingMessage: "No MachineDeployment has the annotations"},
			expect: func(g Gomega, ca *autoscalingv1alpha1.ClusterAutoscaler) {
				g.Expect(conditions.Get(ca, autoscalingv1alpha1.ScalingActiveCondition)).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.NoNodeGroupsReason))
			},
		},
		{
			name:   "an unreachable workload cluster",
			status: autoscaler.Status{Time: loopTime, Err: fmt.Errorf("listing nodes: %w", clustercache.ErrClusterNotConnected)},
			expect: func(g Gomega, ca *autoscalingv1alpha1.ClusterAutoscaler) {
				g.Expect(conditions.Get(ca, autoscalingv1alpha1.ReadyCondition)).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.WorkloadClusterUnreachableReason))
				g.Expect(conditions.GetMessage(ca, autoscalingv1alpha1.ReadyCondition)).To(ContainSubstring("connection to the workload cluster is down"))
				g.Expect(conditions.Get(ca, autoscalingv1alpha1.ScalingActiveCondition)).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.WorkloadClusterUnreachableReason))
			},
		},
		{
			name:   "a workload cluster that fails its health probe while still connected",
			status: autoscaler.Status{Time: loopTime, Err: fmt.Errorf("listing nodes: %w", errHealthProbeFailing)},
			expect: func(g Gomega, ca *autoscalingv1alpha1.ClusterAutoscaler) {
				g.Expect(conditions.Get(ca, autoscalingv1alpha1.ReadyCondition)).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.WorkloadClusterUnreachableReason))
				g.Expect(conditions.GetMessage(ca, autoscalingv1alpha1.ReadyCondition)).To(ContainSubstring("health probe of the workload cluster is failing"))
				g.Expect(conditions.Get(ca, autoscalingv1alpha1.ScalingActiveCondition)).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.WorkloadClusterUnreachableReason))
			},
		},
		{
			name:   "a failed loop",
			status: autoscaler.Status{Time: loopTime, Err: fmt.Errorf("listing node groups: forbidden")},
			expect: func(g Gomega, ca *autoscalingv1alpha1.ClusterAutoscaler) {
				g.Expect(conditions.Get(ca, autoscalingv1alpha1.ReadyCondition)).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.LoopFailedReason))
			},
		},
		{
			name: "at most ten reasons, each within the schema's length",
			status: autoscaler.Status{Time: loopTime, ClusterHealthy: true, ScalingActive: true, NotTriggerScaleUpReasons: func() []autoscaler.ReasonCount {
				reasons := make([]autoscaler.ReasonCount, 12)
				for i := range reasons {
					reasons[i] = autoscaler.ReasonCount{Reason: strings.Repeat("x", 2000), Pods: 12 - i}
				}
				return reasons
			}()},
			expect: func(g Gomega, ca *autoscalingv1alpha1.ClusterAutoscaler) {
				g.Expect(ca.Status.NotTriggerScaleUpReasons).To(HaveLen(10))
				g.Expect(ca.Status.NotTriggerScaleUpReasons[0].Pods).To(BeEquivalentTo(12))
				g.Expect(ca.Status.NotTriggerScaleUpReasons[0].Reason).To(HaveLen(maxReasonLength))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			ca := &autoscalingv1alpha1.ClusterAutoscaler{Status: autoscalingv1alpha1.ClusterAutoscalerStatus{Conditions: tt.conditions}}
			setStatusFromLoop(ca, tt.status)
			tt.expect(g, ca)
		})
	}
}

func TestStampLoopTime(t *testing.T) {
	loopTime := time.Date(2026, 3, 1, 10, 0, 30, 500, time.UTC)
	stamped := statusTime(loopTime)
	tests := []struct {
		name string
		// lastLoopTime is the time read; change changes the status after it was read.
		lastLoopTime *metav1.Time
		change       func(*autoscalingv1alpha1.ClusterAutoscalerStatus)
		// engineStart is when the engine started; an hour before the loop when zero.
		engineStart time.Time
		want        *metav1.Time
	}{
		{
			name:         "an unchanged status keeps the time read",
			lastLoopTime: statusTime(loopTime.Add(-lastLoopTimeRefresh + time.Second)),
			want:         statusTime(loopTime.Add(-lastLoopTimeRefresh + time.Second)),
		},
		{
			name:         "an unchanged status gets the time once the time read is as old as the refresh interval",
			lastLoopTime: statusTime(loopTime.Add(-lastLoopTimeRefresh)),
			want:         stamped,
		},
		{
			name:         "a status that changed gets the time",
			lastLoopTime: statusTime(loopTime.Add(-time.Second)),
			change:       func(status *autoscalingv1alpha1.ClusterAutoscalerStatus) { status.UnschedulablePods++ },
			want:         stamped,
		},
		{
			name:         "a condition that changed stamps the time too",
			lastLoopTime: statusTime(loopTime.Add(-time.Second)),
			change: func(status *autoscalingv1alpha1.ClusterAutoscalerStatus) {
				status.Conditions = append(status.Conditions, metav1.Condition{Type: autoscalingv1alpha1.ReadyCondition, Status: metav1.ConditionTrue})
			},
			want: stamped,
		},
		{
			name:         "the first loop of an engine gets the time, so that a restart shows",
			lastLoopTime: statusTime(loopTime.Add(-3 * time.Second)),
			engineStart:  loopTime.Add(-time.Second),
			want:         stamped,
		},
		{
			name: "a status without a time gets it",
			want: stamped,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			ca := &autoscalingv1alpha1.ClusterAutoscaler{Status: autoscalingv1alpha1.ClusterAutoscalerStatus{
				LastLoopTime: tt.lastLoopTime, Nodes: 3, NodeGroups: []autoscalingv1alpha1.NodeGroupStatus{{ID: "MachineDeployment/ns/md-0"}},
			}}
			read := ca.Status.DeepCopy()
			// What a loop that changed nothing writes: the same, as new values.
			ca.Status.NodeGroups = append([]autoscalingv1alpha1.NodeGroupStatus{}, read.NodeGroups...)
			if tt.change != nil {
				tt.change(&ca.Status)
			}

			engineStart := tt.engineStart
			if engineStart.IsZero() {
				engineStart = loopTime.Add(-time.Hour)
			}
			stampLoopTime(ca, read, loopTime, engineStart)

			g.Expect(ca.Status.LastLoopTime).To(Equal(tt.want))
		})
	}
}

func TestUpdateStatus(t *testing.T) {
	loopTime := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	healthyLoop := autoscaler.Status{Time: loopTime, ClusterHealthy: true, ScalingActive: true, Nodes: 3, ReadyNodes: 3,
		NodeGroups: []autoscaler.NodeGroupStatus{{ID: "MachineDeployment/ns/md-0", Autoscaled: true, MinSize: 1, MaxSize: 5, TargetSize: 3}}}
	engineWith := func(generation int64) *runningEngine {
		return &runningEngine{applied: engineConfig{generation: generation}, startedAt: loopTime.Add(-time.Hour)}
	}
	// autoscaled is a ClusterAutoscaler whose engine ran generation 2 of it.
	autoscaled := func() *autoscalingv1alpha1.ClusterAutoscaler {
		ca := &autoscalingv1alpha1.ClusterAutoscaler{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
		s := newReconcileScope(ca)
		s.engine, s.loop = engineWith(2), healthyLoop
		updateStatus(s)
		return ca
	}
	condition := func(ca *autoscalingv1alpha1.ClusterAutoscaler, conditionType string) *metav1.Condition {
		return conditions.Get(ca, conditionType)
	}

	tests := []struct {
		name   string
		learn  func(s *reconcileScope)
		expect func(g Gomega, ca *autoscalingv1alpha1.ClusterAutoscaler, before autoscalingv1alpha1.ClusterAutoscalerStatus)
	}{
		{
			name:  "an engine running the spec",
			learn: func(s *reconcileScope) { s.engine, s.loop = engineWith(2), healthyLoop },
			expect: func(g Gomega, ca *autoscalingv1alpha1.ClusterAutoscaler, before autoscalingv1alpha1.ClusterAutoscalerStatus) {
				g.Expect(condition(ca, autoscalingv1alpha1.ReadyCondition)).To(haveStatusAndReason(metav1.ConditionTrue, autoscalingv1alpha1.RunningReason))
				g.Expect(condition(ca, autoscalingv1alpha1.ConfigurationAppliedCondition)).To(haveStatusAndReason(metav1.ConditionTrue, autoscalingv1alpha1.AppliedReason))
				g.Expect(ca.Status.ObservedGeneration).To(BeEquivalentTo(2))
				g.Expect(ca.Status.NodeGroups).To(HaveLen(1))
			},
		},
		{
			name: "a paused Cluster keeps the last status of the engine and the configuration it applied",
			learn: func(s *reconcileScope) {
				s.stop(autoscalingv1alpha1.ClusterPausedReason, "Nothing is scaled while Cluster ns/workload has spec.paused")
			},
			expect: func(g Gomega, ca *autoscalingv1alpha1.ClusterAutoscaler, before autoscalingv1alpha1.ClusterAutoscalerStatus) {
				for _, conditionType := range []string{autoscalingv1alpha1.ReadyCondition, autoscalingv1alpha1.ScalingActiveCondition} {
					g.Expect(condition(ca, conditionType)).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.ClusterPausedReason))
					g.Expect(condition(ca, conditionType).Message).To(ContainSubstring("spec.paused"))
				}
				g.Expect(condition(ca, autoscalingv1alpha1.ClusterHealthyCondition)).To(haveStatusAndReason(metav1.ConditionUnknown, autoscalingv1alpha1.ClusterPausedReason))
				g.Expect(condition(ca, autoscalingv1alpha1.ConfigurationAppliedCondition)).To(haveStatusAndReason(metav1.ConditionTrue, autoscalingv1alpha1.AppliedReason))
				g.Expect(ca.Status.NodeGroups).To(HaveLen(1))
			},
		},
		{
			name: "another ClusterAutoscaler owns the Cluster: only conditions are left",
			learn: func(s *reconcileScope) {
				s.stop(autoscalingv1alpha1.ClusterAlreadyAutoscaledReason, "ClusterAutoscaler first already autoscales Cluster ns/workload")
				s.refused = true
			},
			expect: func(g Gomega, ca *autoscalingv1alpha1.ClusterAutoscaler, before autoscalingv1alpha1.ClusterAutoscalerStatus) {
				g.Expect(condition(ca, autoscalingv1alpha1.ReadyCondition)).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.ClusterAlreadyAutoscaledReason))
				g.Expect(condition(ca, autoscalingv1alpha1.ConfigurationAppliedCondition)).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.ClusterAlreadyAutoscaledReason))
				g.Expect(condition(ca, autoscalingv1alpha1.ConfigurationAppliedCondition).Message).To(ContainSubstring("first already autoscales"))
				g.Expect(ca.Status).To(Equal(autoscalingv1alpha1.ClusterAutoscalerStatus{Conditions: ca.Status.Conditions}))
			},
		},
		{
			name: "an invalid spec and no engine: nothing runs",
			learn: func(s *reconcileScope) {
				s.configErr = fmt.Errorf("scaleDown.utilizationThreshold must be within [0, 1]")
				s.stop(autoscalingv1alpha1.InvalidConfigurationReason, "Invalid configuration: "+s.configErr.Error())
			},
			expect: func(g Gomega, ca *autoscalingv1alpha1.ClusterAutoscaler, before autoscalingv1alpha1.ClusterAutoscalerStatus) {
				g.Expect(condition(ca, autoscalingv1alpha1.ReadyCondition)).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.InvalidConfigurationReason))
				g.Expect(condition(ca, autoscalingv1alpha1.ConfigurationAppliedCondition)).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.InvalidConfigurationReason))
				g.Expect(condition(ca, autoscalingv1alpha1.ConfigurationAppliedCondition).Message).To(Equal("Invalid configuration: scaleDown.utilizationThreshold must be within [0, 1]"))
			},
		},
		{
			name: "an invalid spec while an engine runs: it goes on with the generation it has",
			learn: func(s *reconcileScope) {
				s.ca.Generation = 3
				s.configErr = fmt.Errorf("scaleDown.utilizationThreshold must be within [0, 1]")
				s.keptGeneration = 2
				s.engine, s.loop = engineWith(2), healthyLoop
			},
			expect: func(g Gomega, ca *autoscalingv1alpha1.ClusterAutoscaler, before autoscalingv1alpha1.ClusterAutoscalerStatus) {
				g.Expect(condition(ca, autoscalingv1alpha1.ReadyCondition)).To(haveStatusAndReason(metav1.ConditionTrue, autoscalingv1alpha1.RunningReason))
				g.Expect(condition(ca, autoscalingv1alpha1.ConfigurationAppliedCondition)).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.InvalidConfigurationReason))
				g.Expect(condition(ca, autoscalingv1alpha1.ConfigurationAppliedCondition).Message).To(HavePrefix("Invalid configuration in generation 3, autoscaling goes on with generation 2:"))
				g.Expect(ca.Status.ObservedGeneration).To(BeEquivalentTo(2))
			},
		},
		{
			name:  "a deletion waiting for the workload cluster says so in Ready only",
			learn: func(s *reconcileScope) { s.cleanupWait = "Waiting up to 5m0s after deletion for the workload cluster" },
			expect: func(g Gomega, ca *autoscalingv1alpha1.ClusterAutoscaler, before autoscalingv1alpha1.ClusterAutoscalerStatus) {
				g.Expect(condition(ca, autoscalingv1alpha1.ReadyCondition)).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.WorkloadClusterUnreachableReason))
				g.Expect(condition(ca, autoscalingv1alpha1.ScalingActiveCondition)).To(haveStatusAndReason(metav1.ConditionTrue, autoscalingv1alpha1.RunningReason))
			},
		},
		{
			name:  "a reconcile that learned nothing changes nothing",
			learn: func(*reconcileScope) {},
			expect: func(g Gomega, ca *autoscalingv1alpha1.ClusterAutoscaler, before autoscalingv1alpha1.ClusterAutoscalerStatus) {
				g.Expect(ca.Status).To(Equal(before))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			ca := autoscaled()
			before := *ca.Status.DeepCopy()
			s := newReconcileScope(ca)
			tt.learn(s)
			updateStatus(s)
			tt.expect(g, ca, before)
		})
	}
}
