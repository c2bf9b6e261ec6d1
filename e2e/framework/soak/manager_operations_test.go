package soak

import (
	"net/http"
	"sync"
	"testing"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/faultproxy"
)

var (
	scaleWrite    = faultproxy.Request{Verb: "patch", APIGroup: "cluster.x-k8s.io", Resource: "machinedeployments", Subresource: "scale", Namespace: "soak", Name: "md-0", Status: http.StatusOK}
	scaleRead     = faultproxy.Request{Verb: "get", APIGroup: "cluster.x-k8s.io", Resource: "machinedeployments", Subresource: "scale", Namespace: "soak", Name: "md-0", Status: http.StatusOK}
	scaleRefused  = faultproxy.Request{Verb: "patch", APIGroup: "cluster.x-k8s.io", Resource: "machinedeployments", Subresource: "scale", Namespace: "soak", Name: "md-0", Status: http.StatusServiceUnavailable}
	nodeWrite     = faultproxy.Request{Verb: "update", Resource: "nodes", Name: "node-0", Status: http.StatusOK}
	secondScaleOf = faultproxy.Request{Verb: "update", APIGroup: "cluster.x-k8s.io", Resource: "machinedeployments", Subresource: "scale", Namespace: "soak", Name: "md-1", Status: http.StatusOK}
)

// TestCrashTriggerFiresAtTheNthAcceptedWrite checks that an armed crash
// fires once, with the Nth write of its point the API server accepted,
// whatever else the proxies see before and after.
func TestCrashTriggerFiresAtTheNthAcceptedWrite(t *testing.T) {
	var fired []faultproxy.Request
	trigger := &crashTrigger{point: CrashAfterScale, nth: 2, fire: func(r faultproxy.Request) { fired = append(fired, r) }}
	for _, r := range []faultproxy.Request{scaleRead, scaleWrite, scaleRefused, nodeWrite, secondScaleOf, scaleWrite, secondScaleOf} {
		trigger.observe(r)
	}
	if len(fired) != 1 || fired[0].Name != secondScaleOf.Name {
		t.Fatalf("fired with %v, want once with the second accepted /scale write %v", fired, secondScaleOf)
	}
	if seen, ok := trigger.disarm(); !ok || seen != 2 {
		t.Errorf("disarm says %d writes seen, fired %t; want 2, true", seen, ok)
	}
}

// TestCrashTriggerDisarmed checks that a crash disarmed before its write
// never fires, and says how many writes it saw: nothing to act on.
func TestCrashTriggerDisarmed(t *testing.T) {
	fired := 0
	trigger := &crashTrigger{point: CrashAfterNodeWrite, nth: 2, fire: func(faultproxy.Request) { fired++ }}
	trigger.observe(nodeWrite)
	if seen, ok := trigger.disarm(); ok || seen != 1 {
		t.Errorf("disarm says %d writes seen, fired %t; want 1, false", seen, ok)
	}
	trigger.observe(nodeWrite)
	trigger.observe(nodeWrite)
	if fired != 0 {
		t.Errorf("fired %d times once disarmed, want never", fired)
	}
}

// TestCrashTriggerConcurrentWrites checks that writes observed from many
// requests' goroutines at once fire the crash exactly once, and that a
// disarm racing with them either sees it fired or stops it.
func TestCrashTriggerConcurrentWrites(t *testing.T) {
	for range 50 {
		var mu sync.Mutex
		fired := 0
		trigger := &crashTrigger{point: CrashAfterMark, nth: 3, fire: func(faultproxy.Request) {
			mu.Lock()
			defer mu.Unlock()
			fired++
		}}
		machineWrite := faultproxy.Request{Verb: "patch", APIGroup: "cluster.x-k8s.io", Resource: "machines", Name: "m", Status: http.StatusOK}
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				trigger.observe(machineWrite)
			}()
		}
		_, ok := trigger.disarm()
		mu.Lock()
		firedAtDisarm := fired
		mu.Unlock()
		wg.Wait()
		if ok != (firedAtDisarm == 1) {
			t.Fatalf("disarm says fired %t, but the crash fired %d times by then", ok, firedAtDisarm)
		}
		if fired > 1 || fired != firedAtDisarm {
			t.Fatalf("fired %d times, %d by the disarm; want at most once, never after the disarm", fired, firedAtDisarm)
		}
	}
}
