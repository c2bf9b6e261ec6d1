// Command demo shows capi-autoscaler at work on the local simulated stack.
// It starts Kubernetes, Cluster API and the simulated infrastructure
// provider, creates a workload Cluster with two autoscaled
// MachineDeployments, runs the autoscaler manager, applies a workload that
// needs more nodes and removes it again, and shows the live view of
// `kubectl capi-autoscaler top` (package internal/plugin/view) as things change,
// with the pods of the workload cluster. It stops everything it started at
// the end, or with --keep leaves it running until Ctrl-C.
//
//	go run ./hack/demo [--topology=SeparateWorkload] [--keep]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/simcluster"
)

type options struct {
	topology     string
	repoRoot     string
	workDir      string
	manager      string
	keep         bool
	phaseTimeout time.Duration
}

func main() {
	var opts options
	flag.StringVar(&opts.topology, "topology", string(localstack.SelfHosted), "SelfHosted (management and workload in one API server) or SeparateWorkload")
	flag.StringVar(&opts.repoRoot, "repo-root", ".", "Root of the capi-autoscaler repository (binaries in bin/k8s, tool modules in hack/)")
	flag.StringVar(&opts.workDir, "work-dir", "", "Empty directory for the logs and the stack's kubeconfigs and data, kept afterwards; by default a temporary directory, removed unless the demo fails")
	flag.StringVar(&opts.manager, "manager", "bin/manager", "Autoscaler manager binary, relative to --repo-root unless absolute (go build -o bin/manager .)")
	flag.BoolVar(&opts.keep, "keep", false, "Leave the stack and the autoscaler running after the demo, until Ctrl-C")
	flag.DurationVar(&opts.phaseTimeout, "phase-timeout", 5*time.Minute, "How long each phase may take before the demo fails")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, opts)
	stop()
	switch {
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(os.Stderr, "\nDemo interrupted.")
		os.Exit(130)
	case err != nil:
		fmt.Fprintf(os.Stderr, "\nDemo failed: %v\n", err)
		os.Exit(1)
	}
}

// run plays the demo and stops whatever it started.
func run(ctx context.Context, opts options) (retErr error) {
	managerBinary := opts.manager
	if !filepath.IsAbs(managerBinary) {
		managerBinary = filepath.Join(opts.repoRoot, managerBinary)
	}
	if _, err := os.Stat(managerBinary); err != nil {
		return fmt.Errorf("no manager binary at %s: build it with 'go build -o bin/manager .', or run 'make demo'", managerBinary)
	}
	workDir, removeWorkDir, err := prepareWorkDir(opts.workDir)
	if err != nil {
		return err
	}
	// The local stack gets a directory of its own; the demo logs what runs
	// in this process, the simulated provider above all, next to it.
	stackDir, demoLog := filepath.Join(workDir, "stack"), filepath.Join(workDir, "demo.log")
	logDir := filepath.Join(stackDir, "logs")
	defer func() {
		switch {
		case retErr != nil && !errors.Is(retErr, context.Canceled):
			retErr = fmt.Errorf("%w\nLogs: every component in %s (the autoscaler in %s.log), the simulated provider in %s",
				retErr, logDir, simcluster.ManagerProcess, demoLog)
		case removeWorkDir:
			if err := os.RemoveAll(workDir); err != nil {
				retErr = errors.Join(retErr, err)
			}
		}
	}()
	logFile, err := os.Create(demoLog)
	if err != nil {
		return err
	}
	defer logFile.Close()
	ctx = simcluster.SetLogger(ctx, logFile, 2)

	d := &demo{progress: newProgress(os.Stdout), timeout: opts.phaseTimeout}
	d.progress.step("Starting the local stack (%s) in %s", opts.topology, stackDir)
	started := time.Now()
	stack, err := localstack.Start(ctx, localstack.Options{Topology: localstack.Topology(opts.topology), RepoRoot: opts.repoRoot, WorkDir: stackDir})
	if err != nil {
		return fmt.Errorf("starting the local stack: %w", err)
	}
	defer func() {
		d.progress.step("Stopping the autoscaler and the local stack")
		stopping := time.Now()
		if err := stack.Stop(); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("stopping the local stack: %w", err))
			return
		}
		d.progress.done("Stopped everything (%s)", since(stopping))
	}()
	d.progress.done("Local stack ready (%s)", since(started))
	if err := d.connect(stack); err != nil {
		return err
	}

	if err := d.createCluster(ctx); err != nil {
		return err
	}
	metricsAddress, err := d.startAutoscaler(ctx, stack, managerBinary)
	if err != nil {
		return err
	}
	scaleUp, err := d.scaleUp(ctx)
	if err != nil {
		return err
	}
	scaleDown, err := d.scaleDown(ctx)
	if err != nil {
		return err
	}

	d.progress.summary(scaleUp, scaleDown)
	if opts.keep {
		printExploreHelp(stack, metricsAddress, demoLog, filepath.Join(opts.repoRoot, "bin", "kubectl-capi_autoscaler"))
		<-ctx.Done()
		fmt.Println()
	}
	return nil
}

// demo is the state shared by the phases.
type demo struct {
	progress *progress
	timeout  time.Duration
	// mgmt and workload talk to the management and the workload cluster;
	// they are one API server when self-hosted.
	mgmt, workload client.Client
	separate       bool
}

// connect makes the clients of the demo: the management client also knows
// the ClusterAutoscaler API, which the stack's clients do not.
func (d *demo) connect(stack *localstack.Stack) error {
	scheme, err := simcluster.NewScheme()
	if err != nil {
		return err
	}
	mgmt, err := client.New(stack.Management.Config, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("connecting to the management cluster: %w", err)
	}
	d.mgmt, d.workload, d.separate = mgmt, stack.Workload.Client, stack.Workload != stack.Management
	if !d.separate {
		d.workload = mgmt
	}
	return nil
}

// startAutoscaler runs the manager against the management cluster, creates
// the ClusterAutoscaler and waits until it autoscales both node groups. It
// returns the address of the manager's metrics endpoint.
func (d *demo) startAutoscaler(ctx context.Context, stack *localstack.Stack, binary string) (string, error) {
	metricsAddress, err := simcluster.FreeLocalAddress()
	if err != nil {
		return "", err
	}
	if _, err := simcluster.StartManager(ctx, stack, binary, metricsAddress); err != nil {
		return "", fmt.Errorf("starting the autoscaler manager: %w", err)
	}
	d.progress.step("Started the autoscaler manager, logging to %s", simcluster.ManagerLog(stack))

	if err := d.mgmt.Create(ctx, newClusterAutoscaler()); err != nil {
		return "", fmt.Errorf("creating the ClusterAutoscaler: %w", err)
	}
	d.progress.step("Created ClusterAutoscaler %s/%s: scan every 1s, least-waste expander, nodes unneeded for %s are removed", namespace, clusterName, unneededTime)
	started := time.Now()
	if _, err := d.watch(ctx, "Waiting for the autoscaler", started, func(s *state) bool { return s.autoscalerReady && s.autoscaledGroups == len(nodeGroups) }); err != nil {
		return "", fmt.Errorf("the autoscaler did not start autoscaling both node groups: %w", err)
	}
	d.progress.done("The autoscaler manages %d node groups (%s)", len(nodeGroups), since(started))
	return metricsAddress, nil
}

// prepareWorkDir returns the demo's work directory, which must be empty or
// missing, and whether to remove it after a successful demo.
func prepareWorkDir(dir string) (string, bool, error) {
	if dir == "" {
		dir, err := os.MkdirTemp("", "capi-autoscaler-demo-")
		return dir, true, err
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", false, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", false, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", false, err
	}
	if len(entries) > 0 {
		return "", false, fmt.Errorf("work directory %s is not empty", dir)
	}
	return dir, false, nil
}

// printExploreHelp says how to look around, with the kubectl plugin that
// `make demo` builds next to the manager.
func printExploreHelp(stack *localstack.Stack, metricsAddress, demoLog, plugin string) {
	mgmt, workload := "KUBECONFIG="+stack.Management.KubeconfigPath, "KUBECONFIG="+stack.Workload.KubeconfigPath
	fmt.Printf(`
Everything keeps running; press Ctrl-C to stop it. To explore, with the kubectl plugin and your own kubectl:

  %[1]s %[9]s top -n %[3]s
  %[1]s %[9]s status -n %[3]s
  %[1]s %[9]s explain node NODE
  %[1]s kubectl -n %[3]s get clusterautoscalers,machinedeployments,machines
  %[1]s kubectl -n %[3]s get clusterautoscaler %[4]s -o yaml
  %[1]s kubectl -n %[3]s describe machinedeployment md-general
  %[2]s kubectl get nodes
  %[2]s kubectl -n %[3]s create deployment web --image=registry.k8s.io/pause:3.10 --replicas=4
  %[2]s kubectl -n %[3]s set resources deployment web --requests=cpu=1500m,memory=3Gi
  %[2]s kubectl -n %[3]s get events --watch
  curl -s http://%[5]s/metrics | grep ^cluster_autoscaler_

Logs: %[6]s (autoscaler: %[7]s), simulated provider: %[8]s
`, mgmt, workload, namespace, clusterName, metricsAddress, stack.LogDir(), simcluster.ManagerProcess+".log", demoLog, plugin)
}

// since is the time elapsed since t, rounded for people.
func since(t time.Time) time.Duration {
	return time.Since(t).Round(100 * time.Millisecond)
}
