package autoscaler_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"k8s.io/utils/clock"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
)

func TestNewSettingsRefusesAProvisionTimeUnderAMinute(t *testing.T) {
	tests := []struct {
		provisionTime time.Duration
		wantErr       bool
	}{
		{provisionTime: 0, wantErr: true},
		{provisionTime: 30 * time.Second, wantErr: true},
		{provisionTime: time.Minute - time.Nanosecond, wantErr: true},
		{provisionTime: time.Minute},
		{provisionTime: 15 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.provisionTime.String(), func(t *testing.T) {
			g := NewWithT(t)
			config := autoscaler.DefaultConfig()
			config.MaxNodeProvisionTime = tt.provisionTime
			_, err := autoscaler.NewSettings(config, clock.RealClock{})
			if !tt.wantErr {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring("max node provision time must be at least 1m0s, got " + tt.provisionTime.String())))
		})
	}
}

// The deadline of a loop (Engine.Stalled) counts on the minimum loop
// interval being over within a scan interval.
func TestNewSettingsKeepsTheMinLoopIntervalWithinTheScanInterval(t *testing.T) {
	tests := []struct {
		minLoopInterval time.Duration
		wantErr         bool
	}{
		{minLoopInterval: -time.Second, wantErr: true},
		{minLoopInterval: 0},
		{minLoopInterval: 10 * time.Second},
		{minLoopInterval: 10*time.Second + time.Nanosecond, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.minLoopInterval.String(), func(t *testing.T) {
			g := NewWithT(t)
			config := autoscaler.DefaultConfig()
			config.MinLoopInterval = tt.minLoopInterval
			_, err := autoscaler.NewSettings(config, clock.RealClock{})
			if !tt.wantErr {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring("minimum loop interval must be between 0 and the scan interval 10s")))
		})
	}
}
