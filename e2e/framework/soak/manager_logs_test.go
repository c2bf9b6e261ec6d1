package soak

import (
	"strings"
	"testing"
	"time"
)

var logStart = time.Date(2026, 12, 7, 4, 0, 0, 0, time.Local)

// at is an event of a manager's log, s seconds after logStart.
func at(s float64, kind logEventKind) logEvent {
	return logEvent{At: logStart.Add(time.Duration(s * float64(time.Second))), Kind: kind, Line: string(kind)}
}

func TestParseManagerLogLines(t *testing.T) {
	of, lease := `ClusterAutoscaler="soak-x/soak-x"`, "capi-autoscaler-soak-x"
	for line, want := range map[string]logEventKind{
		`I1207 04:00:01.500000   4242 engines.go:288] "Started the autoscaling engine" controller="clusterautoscaler" ClusterAutoscaler="soak-x/soak-x" Cluster="soak-x/soak-x"`: engineStarted,
		`I1207 04:00:01.500000   4242 engines.go:381] "Stopped the autoscaling engine" controller="clusterautoscaler" ClusterAutoscaler="soak-x/soak-x" Cluster="soak-x/soak-x"`: engineStopped,
		`I1207 04:00:01.500000   4242 leases.go:266] "Took the Lease of the Cluster: this manager autoscales it" Lease={"name":"capi-autoscaler-soak-x","namespace":"soak-x"}`:   leaseTaken,
		`I1207 04:00:01.500000   4242 leases.go:270] "Gave up the Lease of the Cluster" Lease={"name":"capi-autoscaler-soak-x","namespace":"soak-x"}`:                            leaseGivenUp,
		`panic: runtime error: invalid memory address or nil pointer dereference`:                                                                                                panicked,
	} {
		event, ok := parseLogLine(line, of, lease)
		if !ok || event.Kind != want {
			t.Errorf("%s: got %v, %v; want %s", line, event.Kind, ok, want)
		}
		if want != panicked && !event.At.Equal(logStart.Add(1500*time.Millisecond)) {
			t.Errorf("%s: at %s", line, event.At)
		}
	}
	for _, line := range []string{
		// The DryRun ClusterAutoscaler's engine, another Cluster's Lease.
		`I1207 04:00:01.500000   4242 engines.go:288] "Started the autoscaling engine" ClusterAutoscaler="soak-x/soak-x-trial"`,
		`I1207 04:00:01.500000   4242 leases.go:266] "Took the Lease of the Cluster: this manager autoscales it" Lease={"name":"capi-autoscaler-other","namespace":"other"}`,
	} {
		if event, ok := parseLogLine(line, of, lease); ok {
			t.Errorf("%s: read as %s", line, event.Kind)
		}
	}
}

// TestManagerViolations checks the engine check on fabricated histories
// of two managers: it must flag engines acting at once, an engine
// started without the Lease, a panic and an exit the soak did not cause,
// and accept a take-over after a kill or a graceful stop.
func TestManagerViolations(t *testing.T) {
	now := logStart.Add(time.Minute)
	suite := managerHistory{Name: "suite", Events: []logEvent{at(0, leaseTaken), at(0.2, engineStarted)}}
	for _, tt := range []struct {
		name      string
		histories []managerHistory
		want      string
	}{
		{
			name:      "one manager acts, the second waits",
			histories: []managerHistory{suite, {Name: "second", Events: []logEvent{at(5, leaseGivenUp)}, Ended: logStart.Add(30 * time.Second), Exited: true}},
		},
		{
			name: "the holder killed, the second takes over after the Lease expires",
			histories: []managerHistory{
				{Name: "suite", Events: suite.Events, Ended: logStart.Add(10 * time.Second), Killed: true, Exited: true},
				{Name: "second", Events: []logEvent{at(26, leaseTaken), at(26.1, engineStarted)}},
			},
		},
		{
			name: "the holder stopped, the second takes over once it gave the Lease up",
			histories: []managerHistory{
				{Name: "suite", Events: append(suite.Events, at(10, leaseGivenUp)), Ended: logStart.Add(11 * time.Second), Exited: true},
				{Name: "second", Events: []logEvent{at(10.1, leaseTaken), at(10.2, engineStarted)}},
			},
		},
		{
			name:      "the leading logged just after the engine started",
			histories: []managerHistory{{Name: "suite", Events: []logEvent{at(0.2, engineStarted), at(0.3, leaseTaken)}}},
		},
		{
			name: "the holder lost the Lease and its engine ran on after the other's started",
			histories: []managerHistory{
				{Name: "suite", Events: append(suite.Events, at(10, leaseGivenUp), at(17, engineStopped))},
				{Name: "second", Events: []logEvent{at(16, leaseTaken), at(16.5, engineStarted)}},
			},
			want: "two engines of the Active ClusterAutoscaler acted at once: in suite from 04:00:00.200000 to 04:00:17.000000, and in second from 04:00:16.500000 to still running",
		},
		{
			name: "the killed holder's engine counted until the kill",
			histories: []managerHistory{
				{Name: "suite", Events: suite.Events, Ended: logStart.Add(10 * time.Second), Killed: true, Exited: true},
				{Name: "second", Events: []logEvent{at(9, leaseTaken), at(9.5, engineStarted)}},
			},
			want: "acted at once",
		},
		{
			name:      "an engine without the Lease",
			histories: []managerHistory{suite, {Name: "second", Events: []logEvent{at(3, engineStarted)}}},
			want:      "the manager second started an engine of the Active ClusterAutoscaler at 04:00:03.000000 without holding the Cluster's Lease",
		},
		{
			name:      "an engine after the Lease was given up",
			histories: []managerHistory{{Name: "suite", Events: []logEvent{at(0, leaseTaken), at(1, leaseGivenUp), at(3, engineStarted)}}},
			want:      "without holding the Cluster's Lease",
		},
		{
			name:      "a panic",
			histories: []managerHistory{{Name: "suite", Events: append(suite.Events, at(3, panicked))}},
			want:      "the manager suite panicked",
		},
		{
			name:      "an exit the soak did not cause",
			histories: []managerHistory{{Name: "suite", Events: suite.Events, Exited: true}},
			want:      "the manager suite exited and the soak neither killed nor stopped it",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			violations := managerViolations(tt.histories, now)
			switch {
			case tt.want == "" && len(violations) > 0:
				t.Fatalf("violations: %v", violations)
			case tt.want != "" && (len(violations) == 0 || !strings.Contains(violations[0], tt.want)):
				t.Fatalf("violations %q, want the first with %q", violations, tt.want)
			}
		})
	}
}

func TestHoldsLease(t *testing.T) {
	for _, tt := range []struct {
		kinds []logEventKind
		want  bool
	}{
		{kinds: nil, want: false},
		{kinds: []logEventKind{leaseTaken, engineStarted}, want: true},
		{kinds: []logEventKind{leaseTaken, leaseGivenUp}, want: false},
		{kinds: []logEventKind{leaseGivenUp, leaseTaken, engineStopped}, want: true},
	} {
		events := make([]logEvent, 0, len(tt.kinds))
		for i, kind := range tt.kinds {
			events = append(events, at(float64(i), kind))
		}
		if got := holdsLease(events); got != tt.want {
			t.Errorf("%v: holds %v, want %v", tt.kinds, got, tt.want)
		}
	}
}

// TestAPanicKeepsItsStack checks that a panic the manager logged and
// recovered is read with its stack, which names where it happened, and
// that the lines after the stack are read as before.
func TestAPanicKeepsItsStack(t *testing.T) {
	of, lease := `ClusterAutoscaler="soak-x/soak-x"`, "capi-autoscaler-soak-x"
	run := &managerRun{}
	for _, line := range []string{
		`E1207 04:00:01.500000   4242 runtime.go:144] "Observed a panic" ClusterAutoscaler="soak-x/soak-x" panic="runtime error: invalid memory address or nil pointer dereference" stacktrace=<`,
		`	goroutine 812 [running]:`,
		`	github.com/capi-autoscaler/capi-autoscaler/autoscaler.(*Engine).loop(0xc000123456)`,
		`		/work/main/autoscaler/engine.go:401 +0x1a4`,
		` >`,
		`I1207 04:00:02.500000   4242 engines.go:381] "Stopped the autoscaling engine" ClusterAutoscaler="soak-x/soak-x"`,
	} {
		run.consume(line, of, lease)
	}
	if len(run.events) != 2 || run.events[0].Kind != panicked || run.events[1].Kind != engineStopped {
		t.Fatalf("events: %+v", run.events)
	}
	if !strings.Contains(run.events[0].Line, "autoscaler/engine.go:401") {
		t.Errorf("the panic's line has no stack: %q", run.events[0].Line)
	}
}
