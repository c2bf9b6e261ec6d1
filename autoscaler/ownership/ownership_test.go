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
