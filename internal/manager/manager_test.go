package manager

import (
	"errors"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	logsv1 "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/flags"
	ctrl "sigs.k8s.io/controller-runtime"
)

func TestNewManagerLogsTheFailedAttemptsWithTheLoggerOfItsContext(t *testing.T) {
	g := NewWithT(t)
	backoff := managerStartBackoff
	t.Cleanup(func() { managerStartBackoff = backoff })
	managerStartBackoff = wait.Backoff{Duration: time.Millisecond, Steps: 3}

	var logged []string
	logger := funcr.New(func(prefix, args string) { logged = append(logged, args) }, funcr.Options{})
	ctx := klog.NewContext(t.Context(), logger)
	attempts := 0
	_, err := newManager(ctx, &rest.Config{}, ctrl.Options{}, func(*rest.Config, ctrl.Options) (ctrl.Manager, error) {
		attempts++
		if attempts == 1 {
			return nil, errors.New("the API server is upgrading")
		}
		return nil, nil
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(attempts).To(Equal(2))
	g.Expect(logged).To(ConsistOf(And(
		ContainSubstring("Creating the manager failed, trying again"),
		ContainSubstring("the API server is upgrading"),
	)))
}

func TestSpreadClustersReplacesLeaderElection(t *testing.T) {
	parse := func(args ...string) *commandLine {
		opts := &commandLine{logging: logsv1.NewLoggingConfiguration()}
		fs := pflag.NewFlagSet("manager", pflag.ContinueOnError)
		opts.addFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return opts
	}
	g := NewWithT(t)

	_, err := managerOptions(parse("--spread-clusters", "--leader-elect"))
	g.Expect(err).To(MatchError(ContainSubstring("exclude each other")), "one replica leading all, or every replica its share: not both")

	_, err = managerOptions(parse("--spread-clusters", "--leader-election-id=replicas/of"))
	g.Expect(err).To(MatchError(ContainSubstring("--leader-election-id")), "the membership Leases' label value")

	opts, err := managerOptions(parse("--spread-clusters", "--leader-election-namespace=capi-autoscaler-system"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(opts.LeaderElection).To(BeFalse(), "every replica runs its reconcilers")
}

func TestManagementCacheDropsManagedFields(t *testing.T) {
	g := NewWithT(t)
	mgrOpts, err := managerOptions(&commandLine{
		diagnostics: flags.ManagerOptions{DiagnosticsAddress: ":8443", TLSMinVersion: "VersionTLS12"},
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(mgrOpts.Cache.DefaultTransform).NotTo(BeNil(), "the management cluster's cache keeps objects as the API server sends them")

	machineDeployment := &clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{
		Name: "md-0", Namespace: "default",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "clusterctl", Operation: metav1.ManagedFieldsOperationApply}},
	}}
	cached, err := mgrOpts.Cache.DefaultTransform(machineDeployment)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cached.(*clusterv1.MachineDeployment).ManagedFields).To(BeEmpty())
	g.Expect(cached.(*clusterv1.MachineDeployment).Name).To(Equal("md-0"))
}
