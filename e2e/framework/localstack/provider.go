package localstack

import (
	"context"
	"fmt"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure"
)

// startProvider runs the simulated infrastructure provider in this process
// until Stop; its controllers catch up on whatever is created meanwhile.
func (s *Stack) startProvider(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("simulated-provider")
	// The Cluster's kubeconfig Secret leads through the workload cluster's
	// fault proxy.
	workloadKubeconfig, err := s.proxiedAdminKubeconfig(s.Workload)
	if err != nil {
		return err
	}
	mgr, err := infrastructure.NewManager(rest.CopyConfig(s.Management.Config), infrastructure.Options{WorkloadKubeconfig: workloadKubeconfig})
	if err != nil {
		return err
	}
	// The provider lives as long as the stack, not as long as the caller's
	// context.
	providerCtx, cancel := context.WithCancel(ctrl.LoggerInto(context.WithoutCancel(ctx), log))
	s.stopProvider = cancel
	s.providerDone = make(chan error, 1)
	go func() {
		s.providerDone <- mgr.Start(providerCtx)
	}()
	syncCtx, cancelSync := context.WithTimeout(ctx, startTimeout)
	defer cancelSync()
	if !mgr.GetCache().WaitForCacheSync(syncCtx) {
		return fmt.Errorf("the simulated provider's caches did not sync")
	}
	log.Info("Simulated provider is running")
	return nil
}
