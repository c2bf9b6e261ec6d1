package soak

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	provisioningv1 "github.com/capi-autoscaler/capi-autoscaler/api/provisioningrequest/v1"
)

func plan(seed uint64, n int) []Operation {
	g := NewGenerator(GeneratorOptions{Seed: seed, MinWait: time.Second, MaxWait: 10 * time.Second, MaxFor: 30 * time.Second})
	ops := make([]Operation, n)
	for i := range ops {
		ops[i] = g.Next()
	}
	return ops
}

func TestSameSeedSameOperations(t *testing.T) {
	for _, seed := range []uint64{0, 1, 42, 1<<63 + 7} {
		first, second := plan(seed, 500), plan(seed, 500)
		if !reflect.DeepEqual(first, second) {
			for i := range first {
				if !reflect.DeepEqual(first[i], second[i]) {
					t.Fatalf("seed %d: operation %d differs: %+v, then %+v", seed, i+1, first[i], second[i])
				}
			}
		}
	}
}

func TestDifferentSeedsDifferentOperations(t *testing.T) {
	seen := map[string]uint64{}
	for seed := uint64(0); seed < 50; seed++ {
		key := ""
		for _, op := range plan(seed, 20) {
			key += op.Name() + "|" + op.Wait.String() + ";"
		}
		if other, ok := seen[key]; ok {
			t.Fatalf("seeds %d and %d give the same 20 operations", other, seed)
		}
		seen[key] = seed
	}
}

// TestEveryKindDrawn checks that a long run exercises every operation the
// soak knows, so that none is dead weight.
func TestEveryKindDrawn(t *testing.T) {
	drawn := map[Kind]int{}
	variants := map[string]int{}
	for _, op := range plan(7, 2000) {
		drawn[op.Kind]++
		switch op.Kind {
		case Provision:
			variants[op.Class]++
		case KubeletDown:
			variants[fmt.Sprintf("dead kubelet %t", op.Dead)]++
		case WorkloadUnreachable:
			variants[fmt.Sprintf("black hole %t", op.BlackHole)]++
		}
	}
	for _, kind := range Kinds() {
		if drawn[kind] == 0 {
			t.Errorf("%s never drawn in 2000 operations: %v", kind, drawn)
		}
	}
	for _, variant := range []string{
		provisioningv1.CheckCapacityProvisioningClass, provisioningv1.BestEffortAtomicScaleUpProvisioningClass,
		"dead kubelet true", "dead kubelet false", "black hole true", "black hole false",
	} {
		if variants[variant] == 0 {
			t.Errorf("%s never drawn in 2000 operations: %v", variant, variants)
		}
	}
}

// TestEveryCrashPointDrawn checks that CrashAtWrite kills after every
// kind of write, the first or the second of its kind.
func TestEveryCrashPointDrawn(t *testing.T) {
	drawn := map[CrashPoint]map[int]bool{}
	for _, op := range plan(7, 5000) {
		if op.Kind != CrashAtWrite {
			continue
		}
		if drawn[op.Point] == nil {
			drawn[op.Point] = map[int]bool{}
		}
		drawn[op.Point][op.Nth] = true
	}
	for _, point := range CrashPoints {
		if !drawn[point][1] || !drawn[point][2] {
			t.Errorf("%s not drawn as the first and the second write: %v", point, drawn)
		}
	}
}

// TestEveryKindHasAnApplier checks that the runner can apply every kind
// the generator draws, rather than fail the operation at run time.
func TestEveryKindHasAnApplier(t *testing.T) {
	for _, kind := range Kinds() {
		if _, ok := appliers[kind]; !ok {
			t.Errorf("no applier for %s", kind)
		}
	}
}

// TestDemandWithinBudget replays the model's own bookkeeping from the
// operations alone: the fitting pods, the buffer and the
// ProvisioningRequests never ask for more
// than DemandBudgetMilli, and anti-affine bursts never need more nodes
// than the groups have at their base max sizes.
func TestDemandWithinBudget(t *testing.T) {
	baseNodes := 0
	for _, shape := range GroupShapes {
		baseNodes += shape.MaxSize
	}
	for seed := uint64(0); seed < 20; seed++ {
		var steady [SteadyWorkloads]int64
		bursts, requests := map[string]int64{}, map[string]int64{}
		var buffer int64
		for _, op := range plan(seed, 1000) {
			switch op.Kind {
			case ScaleWorkload:
				steady[op.Workload] = int64(op.Replicas) * SteadyCPUMilli[op.Workload]
			case Burst:
				if op.Replicas < 1 {
					t.Fatalf("seed %d, %s: an empty burst", seed, op.Name())
				}
				if op.Placement == AntiAffine && op.Replicas > baseNodes {
					t.Fatalf("seed %d, %s: more anti-affine pods than nodes", seed, op.Name())
				}
				bursts[op.Burst] = int64(op.Replicas) * op.CPUMilli
			case EndBurst:
				if _, ok := bursts[op.Burst]; !ok {
					t.Fatalf("seed %d, %s: no such burst", seed, op.Name())
				}
				delete(bursts, op.Burst)
			case Provision:
				if op.Replicas < 1 {
					t.Fatalf("seed %d, %s: an empty request", seed, op.Name())
				}
				requests[op.Request] = int64(op.Replicas) * op.CPUMilli
			case EndProvision:
				if _, ok := requests[op.Request]; !ok {
					t.Fatalf("seed %d, %s: no such request", seed, op.Name())
				}
				delete(requests, op.Request)
			case SetBuffer:
				buffer = int64(op.Replicas) * BufferCPUMilli
			case SetBounds:
				if shape := GroupShapes[op.Group]; op.MaxSize < shape.MaxSize || op.MinSize > shape.MinSize {
					t.Fatalf("seed %d, %s: narrower than the base bounds [%d, %d]", seed, op.Name(), shape.MinSize, shape.MaxSize)
				}
			}
			demand := buffer
			for _, milli := range steady {
				demand += milli
			}
			for _, milli := range bursts {
				demand += milli
			}
			for _, milli := range requests {
				demand += milli
			}
			if demand > DemandBudgetMilli {
				t.Fatalf("seed %d, after %s: demand %dm over the budget", seed, op.Name(), demand)
			}
			if len(bursts) > maxBursts {
				t.Fatalf("seed %d, after %s: %d bursts", seed, op.Name(), len(bursts))
			}
			if len(requests) > maxRequests {
				t.Fatalf("seed %d, after %s: %d requests", seed, op.Name(), len(requests))
			}
		}
	}
}
