package clusterstate_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/clusterstate"
)

func TestBackoffDoublesUpToTheMaximumAndResets(t *testing.T) {
	g := NewWithT(t)
	registry := clusterstate.NewRegistry(clusterstate.Options{Backoff: clusterstate.BackoffOptions{
		Initial: 5 * time.Minute, Max: 30 * time.Minute, ResetAfter: 3 * time.Hour,
	}})
	now := time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)
	const group = "MachineDeployment/default/md-0"

	g.Expect(registry.BackoffOf(group, now).Until).To(BeZero(), "no failure, no backoff")

	// Each failure right after the previous backoff ends waits twice as long.
	var waits []time.Duration
	for range 5 {
		until := registry.Backoff(group, "ScaleUpTimedOut", "nodes did not register", now)
		waits = append(waits, until.Sub(now))
		now = until
	}
	g.Expect(waits).To(Equal([]time.Duration{5 * time.Minute, 10 * time.Minute, 20 * time.Minute, 30 * time.Minute, 30 * time.Minute}))

	status := registry.BackoffOf(group, now.Add(-time.Minute))
	g.Expect(status.Until).To(Equal(now))
	g.Expect(status.Reason).To(Equal("ScaleUpTimedOut"))
	g.Expect(status.Message).To(Equal("nodes did not register"))
	g.Expect(registry.BackoffOf(group, now).Until).To(BeZero(), "the backoff ends at its time")

	later := now.Add(3 * time.Hour)
	g.Expect(registry.Backoff(group, "ScaleUpTimedOut", "again", later)).To(Equal(later.Add(5*time.Minute)),
		"three hours without failures start over at the initial backoff")
	g.Expect(registry.BackoffOf("MachineDeployment/default/other", later).Until).To(BeZero(), "groups back off on their own")
}

func TestRepeatedFailureDuringBackoffDoesNotDoubleIt(t *testing.T) {
	g := NewWithT(t)
	registry := clusterstate.NewRegistry(clusterstate.Options{Backoff: clusterstate.BackoffOptions{
		Initial: 5 * time.Minute, Max: 30 * time.Minute, ResetAfter: 3 * time.Hour,
	}})
	now := time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)
	registry.Backoff("g", "Failed", "machine failed", now)
	until := registry.Backoff("g", "Failed", "machine failed", now.Add(10*time.Second))
	g.Expect(until).To(Equal(now.Add(10*time.Second + 5*time.Minute)))
}
