// Package clustergen generates random but realistic clusters and pending
// pods, deterministic by seed: node kinds like node groups (instance type,
// zone, taints, capacity, extended resources), optionally volumes and DRA
// devices, pods already bound to the nodes, and pending pods that use the
// scheduling constraints the simulator implements. It feeds the harness that compares the simulator with
// kube-scheduler, so it makes what kube-scheduler would see: objects the
// API server accepts, in the state their controllers would leave them.
package clustergen

import (
	"fmt"
	"math/rand/v2"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Options say what to generate. Zero values take the defaults.
type Options struct {
	// Seed makes the cluster: the same seed and options give the same
	// objects.
	Seed uint64
	// NodesPerKind is the largest number of nodes of one kind; each kind
	// gets between half of it and all of it (default 6).
	NodesPerKind int
	// PendingPods is the number of pending pods (default 300).
	PendingPods int
	// Volumes adds storage: classes, claims, persistent volumes, CSI
	// attach limits, and pods that use them.
	Volumes bool
	// DRA adds Dynamic Resource Allocation: device classes, the nodes'
	// ResourceSlices, resource claims allocated to bound pods, and pending
	// pods with claims.
	DRA bool
}

func (o Options) withDefaults() Options {
	if o.NodesPerKind <= 0 {
		o.NodesPerKind = 6
	}
	if o.PendingPods <= 0 {
		o.PendingPods = 300
	}
	return o
}

// Cluster is a generated cluster. Create the objects in the order of the
// fields: namespaces first, pending pods last.
type Cluster struct {
	Namespaces             []*corev1.Namespace
	Nodes                  []*corev1.Node
	CSINodes               []*storagev1.CSINode
	StorageClasses         []*storagev1.StorageClass
	PersistentVolumes      []*corev1.PersistentVolume
	PersistentVolumeClaims []*corev1.PersistentVolumeClaim
	DeviceClasses          []*resourceapi.DeviceClass
	ResourceSlices         []*resourceapi.ResourceSlice
	// BoundPods are on their nodes already (spec.nodeName set), Running.
	BoundPods []*corev1.Pod
	// ResourceClaims come after the bound pods: the status.reservedFor of
	// those allocated to bound pods names them, and takes their UIDs once
	// they are created.
	ResourceClaims []*resourceapi.ResourceClaim
	// PendingPods wait for a node.
	PendingPods []*corev1.Pod
}

// Generate makes a cluster.
func Generate(opts Options) *Cluster {
	opts = opts.withDefaults()
	g := &generator{
		opts: opts,
		rnd:  rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x5eed)),
		c:    &Cluster{},
	}
	g.namespaces()
	g.nodes()
	if opts.Volumes {
		g.storageObjects()
	}
	if opts.DRA {
		g.draObjects()
	}
	g.boundPods()
	for i := range opts.PendingPods {
		g.c.PendingPods = append(g.c.PendingPods, g.pendingPod(fmt.Sprintf("pending-%05d", i)))
	}
	return g.c
}

// generator holds the random source and what was generated so far, which
// later objects refer to.
type generator struct {
	opts Options
	rnd  *rand.Rand
	c    *Cluster
	// free is what is left of each node for bound pods, by node name.
	free map[string]*capacity
	// kindOf is the kind of each node, by node name.
	kindOf map[string]*nodeKind
	// storage is what pods' volumes refer to; nil without Options.Volumes.
	storage *storageState
	// dra is what pods' resource claims refer to; nil without Options.DRA.
	dra *draState
}

const (
	// AppLabel and TierLabel are the labels selectors of the generated
	// pods match; HashLabel varies within an app, like a Deployment's
	// pod-template-hash, for matchLabelKeys.
	AppLabel  = "app"
	TierLabel = "tier"
	HashLabel = "pod-template-hash"
	// TeamLabel is the namespaces' label that namespace selectors match.
	TeamLabel = "team"
)

var (
	zones      = []string{"zone-a", "zone-b", "zone-c"}
	apps       = []string{"web", "api", "db", "cache", "batch", "queue"}
	tiers      = []string{"frontend", "backend"}
	hashes     = []string{"5d8f7c", "6b9a21", "7c0e43"}
	teams      = []string{"payments", "search", "platform"}
	namespaces = []struct{ name, team, env string }{
		{"payments", "payments", "prod"},
		{"payments-dev", "payments", "dev"},
		{"search", "search", "prod"},
		{"platform", "platform", "prod"},
	}
)

func (g *generator) namespaces() {
	for _, ns := range namespaces {
		g.c.Namespaces = append(g.c.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name:   ns.name,
			Labels: map[string]string{TeamLabel: ns.team, "env": ns.env},
		}})
	}
}

// chance returns true with probability p.
func (g *generator) chance(p float64) bool { return g.rnd.Float64() < p }

// pick returns a random element of s.
func pick[T any](g *generator, s []T) T { return s[g.rnd.IntN(len(s))] }

// between returns a random int in [lo, hi].
func (g *generator) between(lo, hi int) int { return lo + g.rnd.IntN(hi-lo+1) }

// sample returns n distinct random elements of s, in the order of s.
func sample[T any](g *generator, s []T, n int) []T {
	chosen := g.rnd.Perm(len(s))[:min(n, len(s))]
	keep := make([]bool, len(s))
	for _, i := range chosen {
		keep[i] = true
	}
	var out []T
	for i, v := range s {
		if keep[i] {
			out = append(out, v)
		}
	}
	return out
}
