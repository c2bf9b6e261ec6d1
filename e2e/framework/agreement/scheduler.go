package agreement

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	componentbaseconfigv1alpha1 "k8s.io/component-base/config/v1alpha1"
	schedulerconfigv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// schedulerConfig configures kube-scheduler to judge every node and to ask
// the extender last: one profile that scores (and so filters) every node,
// without the PostFilter plugins, which would otherwise try to make room
// for the pods the extender turns away: preemption, and DynamicResources,
// which deallocates claims reserved for no other pod.
func schedulerConfig(kubeconfig, extenderURL string) *schedulerconfigv1.KubeSchedulerConfiguration {
	return &schedulerconfigv1.KubeSchedulerConfiguration{
		TypeMeta:       metav1.TypeMeta{APIVersion: schedulerconfigv1.SchemeGroupVersion.String(), Kind: "KubeSchedulerConfiguration"},
		LeaderElection: componentbaseconfigv1alpha1.LeaderElectionConfiguration{LeaderElect: ptr.To(false)},
		// Each pod's status is one write: thousands of pods.
		ClientConnection: componentbaseconfigv1alpha1.ClientConnectionConfiguration{Kubeconfig: kubeconfig, QPS: 1000, Burst: 2000},
		Profiles: []schedulerconfigv1.KubeSchedulerProfile{{
			SchedulerName:            ptr.To("default-scheduler"),
			PercentageOfNodesToScore: ptr.To[int32](100),
			Plugins: &schedulerconfigv1.Plugins{PostFilter: schedulerconfigv1.PluginSet{
				Disabled: []schedulerconfigv1.Plugin{{Name: "DefaultPreemption"}, {Name: "DynamicResources"}},
			}},
		}},
		Extenders: []schedulerconfigv1.Extender{{
			URLPrefix:        extenderURL,
			FilterVerb:       filterVerb,
			NodeCacheCapable: true,
			Ignorable:        false,
			HTTPTimeout:      metav1.Duration{Duration: 30 * time.Second},
		}},
	}
}

// startScheduler runs kube-scheduler against cluster with the extender,
// writing its configuration and serving certificate under dir.
func startScheduler(ctx context.Context, stack *localstack.Stack, binary, dir string, cluster *localstack.Cluster, extenderURL string) (*localstack.Process, error) {
	config, err := yaml.Marshal(schedulerConfig(cluster.KubeconfigPath, extenderURL))
	if err != nil {
		return nil, err
	}
	configPath := filepath.Join(dir, "kube-scheduler.yaml")
	if err := os.WriteFile(configPath, config, 0o600); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	return stack.StartProcess(ctx, cluster.Name+"-kube-scheduler", binary,
		"--config="+configPath,
		"--authentication-kubeconfig="+cluster.KubeconfigPath,
		"--authorization-kubeconfig="+cluster.KubeconfigPath,
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		// A self-signed serving certificate, written here rather than in
		// /var/run/kubernetes.
		"--cert-dir="+filepath.Join(dir, "kube-scheduler-certs"),
	)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}
