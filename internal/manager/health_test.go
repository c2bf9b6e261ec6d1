package manager

import (
	"context"
	"net/http/httptest"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// syncingCache is a cache whose informers have synced, or never do.
type syncingCache struct {
	cache.Cache
	synced bool
}

func (c syncingCache) WaitForCacheSync(ctx context.Context) bool {
	if !c.synced {
		<-ctx.Done()
	}
	return c.synced
}

func TestReadinessWaitsForTheCachesOfTheManagementCluster(t *testing.T) {
	g := NewWithT(t)
	probe := httptest.NewRequest("GET", "/readyz", nil)

	g.Expect(cachesSynced(syncingCache{synced: false})(probe)).To(MatchError(ContainSubstring("have not synced")))
	g.Expect(cachesSynced(syncingCache{synced: true})(probe)).To(Succeed())
}
