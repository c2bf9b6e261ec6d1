package framework

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// StartInformers starts the informers until the spec ends, and waits for
// their caches to sync; watches names them in the failure. Register the
// informers' event handlers before: the handlers then see every object
// already there.
func StartInformers(ctx context.Context, informers cache.Cache, watches string) {
	GinkgoHelper()
	watchCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer GinkgoRecover()
		Expect(informers.Start(watchCtx)).To(Succeed())
	}()
	// Stopped and waited for, so that no handler runs after the spec.
	DeferCleanup(func() {
		stop()
		<-done
	})
	Expect(informers.WaitForCacheSync(ctx)).To(BeTrue(), watches+" did not sync")
}
