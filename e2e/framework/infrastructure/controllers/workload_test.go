package controllers

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// TestWorkloadClientRegistersABurstAtOnce checks that the client the
// SimMachines register their Nodes with lets a burst of 30 machines
// register together, as 30 kubelets would, rather than at client-go's
// default of 5 a second after a burst of 10.
func TestWorkloadClientRegistersABurstAtOnce(t *testing.T) {
	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.Clusters["workload"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:6443"}
	kubeconfig.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: "t"}
	kubeconfig.Contexts["workload"] = &clientcmdapi.Context{Cluster: "workload", AuthInfo: "admin"}
	kubeconfig.CurrentContext = "workload"
	data, err := clientcmd.Write(*kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}}
	c := fake.NewClientBuilder().WithObjects(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: secret.Name("c", secret.Kubeconfig)},
		Data:       map[string][]byte{secret.KubeconfigDataName: data},
	}).Build()

	clientset, err := NewWorkloadClients().Get(context.Background(), c, cluster)
	if err != nil {
		t.Fatal(err)
	}
	limiter := clientset.CoreV1().RESTClient().GetRateLimiter()
	registrations := 0
	for registrations < 30 && limiter.TryAccept() {
		registrations++
	}
	if registrations < 30 {
		t.Errorf("the workload client lets %d Node registrations through at once, want a burst's 30", registrations)
	}
}
