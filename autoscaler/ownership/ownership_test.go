package ownership_test

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/ownership"
)

const (
	ours    types.UID = "0a0a0a0a-0000-4000-8000-000000000001"
	another types.UID = "0a0a0a0a-0000-4000-8000-000000000002"
	gone    types.UID = "0a0a0a0a-0000-4000-8000-000000000003"
)

type clusterAutoscalers map[types.UID]types.NamespacedName

func (c clusterAutoscalers) Find(_ context.Context, uid types.UID) (types.NamespacedName, bool, error) {
	if uid == "" {
		return types.NamespacedName{}, false, errors.New("looked up a value that names no ClusterAutoscaler")
	}
	key, found := c[uid]
	return key, found, nil
}

func TestStampAndParseAreInverse(t *testing.T) {
	g := NewWithT(t)
	for _, detail := range []string{"2026-12-06T18:00:00Z", "1767268800", ""} {
		placer, got := ownership.Parse(ownership.Stamp(ours, detail))
		g.Expect(placer).To(Equal(ours))
		g.Expect(got).To(Equal(detail))
	}
	placer, detail := ownership.Parse("2026-11-23T04:00:00Z")
	g.Expect(placer).To(BeEmpty(), "versions before recorded no ClusterAutoscaler")
	g.Expect(detail).To(Equal("2026-11-23T04:00:00Z"))
}

func TestClaim(t *testing.T) {
	owner := ownership.Owner{UID: ours, ClusterAutoscalers: clusterAutoscalers{another: {Namespace: "default", Name: "another"}}}
	for _, tt := range []struct {
		name     string
		owner    ownership.Owner
		value    string
		ours     bool
		orphaned bool
		placedBy string
	}{
		{name: "placed for the owner", owner: owner, value: ownership.Stamp(ours, "1767268800"), ours: true},
		{name: "placed by a version that recorded no ClusterAutoscaler", owner: owner, value: "1767268800", ours: true,
			placedBy: "a capi-autoscaler version that recorded no ClusterAutoscaler"},
		{name: "placed for a ClusterAutoscaler that no longer exists", owner: owner, value: ownership.Stamp(gone, "1767268800"), ours: true, orphaned: true,
			placedBy: "ClusterAutoscaler UID " + string(gone) + ", which no longer exists"},
		{name: "placed for another ClusterAutoscaler that exists", owner: owner, value: ownership.Stamp(another, "1767268800"),
			placedBy: "ClusterAutoscaler default/another (UID " + string(another) + ")"},
		{name: "placed for another, when nobody can tell which exist", owner: ownership.Owner{UID: ours}, value: ownership.Stamp(gone, "1767268800"),
			placedBy: "ClusterAutoscaler UID " + string(gone)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			claim, err := tt.owner.Claim(context.Background(), tt.value)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(claim.Ours()).To(Equal(tt.ours))
			g.Expect(claim.Orphaned).To(Equal(tt.orphaned))
			if tt.placedBy != "" {
				g.Expect(claim.PlacedBy()).To(Equal(tt.placedBy))
			}
		})
	}
}

// countedClusterAutoscalers counts the lookups, and fails those of fail.
type countedClusterAutoscalers struct {
	clusterAutoscalers
	fail    types.UID
	lookups map[types.UID]int
}

func (c *countedClusterAutoscalers) Find(ctx context.Context, uid types.UID) (types.NamespacedName, bool, error) {
	c.lookups[uid]++
	if uid == c.fail {
		return types.NamespacedName{}, false, errors.New("the cache is not synced")
	}
	return c.clusterAutoscalers.Find(ctx, uid)
}

func TestRememberingLooksEachClusterAutoscalerUpOnceUntilForget(t *testing.T) {
	g := NewWithT(t)
	const failing types.UID = "0a0a0a0a-0000-4000-8000-000000000004"
	counted := &countedClusterAutoscalers{
		clusterAutoscalers: clusterAutoscalers{another: {Namespace: "default", Name: "another"}},
		fail:               failing, lookups: map[types.UID]int{},
	}
	plain := ownership.Owner{UID: ours, ClusterAutoscalers: counted.clusterAutoscalers}
	owner, forget := ownership.Owner{UID: ours, ClusterAutoscalers: counted}.Remembering()

	values := []string{ownership.Stamp(ours, "1"), ownership.Stamp(another, "1"), ownership.Stamp(gone, "1"), "1767268800"}
	for range 3 {
		for _, value := range values {
			claim, err := owner.Claim(t.Context(), value)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(plain.Claim(t.Context(), value)).To(Equal(claim), "the claim without remembering, for %s", value)
		}
		_, err := owner.Claim(t.Context(), ownership.Stamp(failing, "1"))
		g.Expect(err).To(MatchError(ContainSubstring("the cache is not synced")))
	}
	g.Expect(counted.lookups).To(Equal(map[types.UID]int{another: 1, gone: 1, failing: 3}), "failed lookups are asked again")

	forget()
	_, err := owner.Claim(t.Context(), ownership.Stamp(another, "1"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(counted.lookups[another]).To(Equal(2), "looked up again once forgotten")

	unknown, _ := ownership.Owner{UID: ours}.Remembering()
	claim, err := unknown.Claim(t.Context(), ownership.Stamp(gone, "1"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(claim.Another).To(BeTrue(), "without ClusterAutoscalers every other one is still taken to exist")
}
