// Command localstack runs the local end-to-end stack (Kubernetes, kwok,
// Cluster API and the simulated infrastructure provider) until interrupted,
// then stops every process it started.
//
//	go run ./hack/localstack --topology=SeparateWorkload
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

func main() {
	var (
		topology    string
		repoRoot    string
		workDir     string
		manager     string
		managerArgs string
	)
	klog.InitFlags(nil)
	flag.StringVar(&topology, "topology", string(localstack.SelfHosted), "SelfHosted (management and workload in one API server) or SeparateWorkload")
	flag.StringVar(&repoRoot, "repo-root", ".", "Root of the capi-autoscaler repository (binaries in bin/k8s, tool modules in hack/)")
	flag.StringVar(&workDir, "work-dir", "", "Empty directory for certificates, kubeconfigs, data and logs, kept after stopping; a temporary directory removed on stop when empty")
	flag.StringVar(&manager, "manager", "", "Autoscaler manager binary to run against the management cluster")
	flag.StringVar(&managerArgs, "manager-args", "", "Space-separated extra arguments of the manager")
	flag.Parse()

	log := klog.NewKlogr()
	ctrl.SetLogger(log)
	ctx := ctrl.LoggerInto(ctrl.SetupSignalHandler(), log)

	stack, err := localstack.Start(ctx, localstack.Options{
		Topology: localstack.Topology(topology),
		RepoRoot: repoRoot,
		WorkDir:  workDir,
	})
	if err != nil {
		log.Error(err, "Failed to start the local stack")
		os.Exit(1)
	}
	exitCode := 0
	if manager != "" {
		args := append([]string{"--kubeconfig=" + stack.Management.KubeconfigPath}, strings.Fields(managerArgs)...)
		if _, err := stack.StartProcess(ctx, "capi-autoscaler", manager, args...); err != nil {
			log.Error(err, "Failed to start the autoscaler manager")
			exitCode = 1
		}
	}
	if exitCode == 0 {
		fmt.Printf("Management cluster: export KUBECONFIG=%s\n", stack.Management.KubeconfigPath)
		if stack.Workload != stack.Management {
			fmt.Printf("Workload cluster:   export KUBECONFIG=%s\n", stack.Workload.KubeconfigPath)
		}
		fmt.Printf("Logs: %s\nPress Ctrl-C to stop.\n", stack.LogDir())
		<-ctx.Done()
	}
	log.Info("Stopping the local stack")
	if err := stack.Stop(); err != nil {
		log.Error(err, "Failed to stop the local stack cleanly")
		exitCode = 1
	}
	os.Exit(exitCode)
}
