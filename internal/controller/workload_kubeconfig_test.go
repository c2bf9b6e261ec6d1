package controller

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	testenv "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/envtest"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/kustomize"
)

func TestWorkloadKubeconfigsGet(t *testing.T) {
	created := metav1.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	clusterKubeconfig := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "workload-kubeconfig"},
		Data:       map[string][]byte{secret.KubeconfigDataName: []byte("admin")},
	}
	named := kubeconfigSecretFor("workload", "ns", "autoscaler-kubeconfig")
	named.Data = map[string][]byte{"kubeconfig": []byte("autoscaler"), secret.KubeconfigDataName: []byte("other")}
	clusterAutoscaler := func(name string, createdAt metav1.Time, ref *autoscalingv1alpha1.WorkloadKubeconfigSecretReference) *autoscalingv1alpha1.ClusterAutoscaler {
		return &autoscalingv1alpha1.ClusterAutoscaler{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, CreationTimestamp: createdAt},
			Spec:       autoscalingv1alpha1.ClusterAutoscalerSpec{ClusterName: "workload", WorkloadKubeconfigSecretRef: ref},
		}
	}
	namedRef := &autoscalingv1alpha1.WorkloadKubeconfigSecretReference{Name: named.Name, Key: "kubeconfig"}
	tests := []struct {
		name   string
		others []client.Object
		// key is the Secret the ClusterCache asks for.
		key client.ObjectKey
		// want is the kubeconfig it gets; wantErr the error instead.
		want    string
		wantErr string
	}{
		{
			name: "no ClusterAutoscaler names the Cluster",
			key:  client.ObjectKeyFromObject(clusterKubeconfig),
			want: "admin",
		},
		{
			name:   "the owner names no Secret",
			others: []client.Object{clusterAutoscaler("owner", created, nil)},
			key:    client.ObjectKeyFromObject(clusterKubeconfig),
			want:   "admin",
		},
		{
			name:   "the owner names a Secret and a key",
			others: []client.Object{clusterAutoscaler("owner", created, namedRef)},
			key:    client.ObjectKeyFromObject(clusterKubeconfig),
			want:   "autoscaler",
		},
		{
			name:   "the owner names a Secret, with the default key",
			others: []client.Object{clusterAutoscaler("owner", created, &autoscalingv1alpha1.WorkloadKubeconfigSecretReference{Name: named.Name})},
			key:    client.ObjectKeyFromObject(clusterKubeconfig),
			want:   "other",
		},
		{
			name: "a ClusterAutoscaler refused for a newer one names a Secret",
			others: []client.Object{
				clusterAutoscaler("owner", created, nil),
				clusterAutoscaler("refused", metav1.NewTime(created.Add(time.Minute)), namedRef),
			},
			key:  client.ObjectKeyFromObject(clusterKubeconfig),
			want: "admin",
		},
		{
			name:    "the Secret the owner names does not exist",
			others:  []client.Object{clusterAutoscaler("owner", created, &autoscalingv1alpha1.WorkloadKubeconfigSecretReference{Name: "missing"})},
			key:     client.ObjectKeyFromObject(clusterKubeconfig),
			wantErr: "kubeconfig not found: Secret ns/missing does not exist",
		},
		{
			name:    "the Secret the owner names has no such key",
			others:  []client.Object{clusterAutoscaler("owner", created, &autoscalingv1alpha1.WorkloadKubeconfigSecretReference{Name: named.Name, Key: "missing"})},
			key:     client.ObjectKeyFromObject(clusterKubeconfig),
			wantErr: `kubeconfig not found: Secret ns/autoscaler-kubeconfig has no key "missing"`,
		},
		{
			name:   "another Secret",
			others: []client.Object{clusterAutoscaler("owner", created, namedRef)},
			key:    client.ObjectKeyFromObject(named),
			want:   "other",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			scheme := runtime.NewScheme()
			g.Expect(autoscalingv1alpha1.AddToScheme(scheme)).To(Succeed())
			g.Expect(corev1.AddToScheme(scheme)).To(Succeed())
			c := fake.NewClientBuilder().WithScheme(scheme).
				WithObjects(append([]client.Object{clusterKubeconfig.DeepCopy(), named.DeepCopy()}, tt.others...)...).
				WithIndex(&autoscalingv1alpha1.ClusterAutoscaler{}, clusterNameField, indexByClusterName).Build()

			got := &corev1.Secret{}
			err := NewWorkloadKubeconfigs(c).Get(context.Background(), tt.key, got)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(got.Data[secret.KubeconfigDataName])).To(Equal(tt.want))
		})
	}
}

func TestClusterCacheSeesOnlyAutoscaledClustersAndAReconnectedOneGoneOnce(t *testing.T) {
	g := NewWithT(t)
	scheme := runtime.NewScheme()
	g.Expect(clusterv1.AddToScheme(scheme)).To(Succeed())
	g.Expect(autoscalingv1alpha1.AddToScheme(scheme)).To(Succeed())
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "workload"}}
	other := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "other"}}
	notAutoscaled := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "not-autoscaled"}}
	autoscaling := func(cluster *clusterv1.Cluster) *autoscalingv1alpha1.ClusterAutoscaler {
		return &autoscalingv1alpha1.ClusterAutoscaler{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: cluster.Name},
			Spec:       autoscalingv1alpha1.ClusterAutoscalerSpec{ClusterName: cluster.Name},
		}
	}
	managerClient := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(cluster, other, notAutoscaled, autoscaling(cluster), autoscaling(other)).
		WithIndex(&autoscalingv1alpha1.ClusterAutoscaler{}, clusterNameField, indexByClusterName).Build()
	kubeconfigs := NewWorkloadKubeconfigs(managerClient)
	c := clusterCacheClient{Client: managerClient, kubeconfigs: kubeconfigs}
	get := func(obj *clusterv1.Cluster) error {
		return c.Get(context.Background(), client.ObjectKeyFromObject(obj), &clusterv1.Cluster{})
	}

	g.Expect(get(notAutoscaled)).To(Satisfy(apierrors.IsNotFound), "connected to a Cluster no ClusterAutoscaler names")
	g.Expect(get(cluster)).To(Succeed())
	g.Expect(kubeconfigs.reconnect(client.ObjectKeyFromObject(cluster))).To(BeTrue())
	g.Expect(kubeconfigs.reconnect(client.ObjectKeyFromObject(cluster))).To(BeFalse(), "asked for already")
	g.Expect(get(other)).To(Succeed())
	g.Expect(get(cluster)).To(Satisfy(apierrors.IsNotFound))
	g.Expect(get(cluster)).To(Succeed(), "connected again the next time")
}

func TestSameCredentials(t *testing.T) {
	token := &rest.Config{Host: "https://a", BearerToken: "one"}
	certificate := &rest.Config{Host: "https://a", TLSClientConfig: rest.TLSClientConfig{CertData: []byte("cert"), KeyData: []byte("key")}}
	tests := []struct {
		name string
		a, b *rest.Config
		want bool
	}{
		{name: "same token", a: token, b: &rest.Config{Host: "https://a", BearerToken: "one"}, want: true},
		{name: "same token, the server as seen from inside the cluster", a: token, b: &rest.Config{Host: "https://10.96.0.1", BearerToken: "one"}, want: true},
		{name: "another token", a: token, b: &rest.Config{Host: "https://a", BearerToken: "two"}},
		{name: "same certificate", a: certificate, b: rest.CopyConfig(certificate), want: true},
		{name: "another key", a: certificate, b: &rest.Config{Host: "https://a", TLSClientConfig: rest.TLSClientConfig{CertData: []byte("cert"), KeyData: []byte("other")}}},
		{name: "a token instead of a certificate", a: certificate, b: token},
		{name: "impersonating", a: token, b: &rest.Config{Host: "https://a", BearerToken: "one", Impersonate: rest.ImpersonationConfig{UserName: "someone"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(sameCredentials(tt.a, tt.b)).To(Equal(tt.want))
		})
	}
}

var _ = Describe("Workload kubeconfig", Ordered, func() {
	// reconnectTimeout bounds a reconnect: a loop to see the change, the
	// ClusterCache's next health probe (10 s) to disconnect and the next
	// replay of the Cluster (ClusterResyncPeriod) to connect again.
	const reconnectTimeout = time.Minute

	BeforeAll(func() {
		installWorkloadRBAC()
	})

	It("reaches the workload cluster with the identity of the Secret the ClusterAutoscaler names, never with the Cluster's", func() {
		// The ClusterCache does not connect, with the Cluster's admin
		// kubeconfig or any other, while no ClusterAutoscaler names the
		// Cluster.
		fixture := newWorkloadCluster(env.Config.Host)
		cluster := client.ObjectKeyFromObject(fixture.Cluster)
		notConnected := func() error {
			_, err := reconciler.ClusterCache.GetRESTConfig(ctx, cluster)
			return err
		}
		Consistently(notConnected, 2*ClusterResyncPeriod).Should(HaveOccurred())
		key := createClusterAutoscalerWithKubeconfig(fixture, &autoscalingv1alpha1.WorkloadKubeconfigSecretReference{Name: "autoscaler-kubeconfig", Key: "kubeconfig"})

		By("refusing to run while the Secret is missing, without connecting with the Cluster's kubeconfig instead")
		expectNoEngineFor(key, autoscalingv1alpha1.WorkloadKubeconfigNotFoundReason, "Secret "+fixture.Namespace+"/autoscaler-kubeconfig does not exist")
		Consistently(notConnected, 2*ClusterResyncPeriod).Should(HaveOccurred())
		Eventually(func(g Gomega) {
			events := &eventsv1.EventList{}
			g.Expect(k8sClient.List(ctx, events, client.InNamespace(fixture.Namespace))).To(Succeed())
			g.Expect(events.Items).To(ContainElement(MatchFields(IgnoreExtras, Fields{
				"Type":      Equal(corev1.EventTypeWarning),
				"Reason":    Equal(autoscalingv1alpha1.WorkloadKubeconfigNotFoundReason),
				"Regarding": MatchFields(IgnoreExtras, Fields{"Name": Equal(key.Name)}),
			})))
		}, waitTimeout).Should(Succeed())

		By("refusing a Secret without the key")
		kubeconfigSecret := kubeconfigSecretFor(fixture.Cluster.Name, fixture.Namespace, "autoscaler-kubeconfig")
		kubeconfigSecret.Data = map[string][]byte{secret.KubeconfigDataName: serviceAccountKubeconfig(workloadServiceAccount).kubeconfig}
		Expect(k8sClient.Create(ctx, kubeconfigSecret)).To(Succeed())
		expectNoEngineFor(key, autoscalingv1alpha1.WorkloadKubeconfigNotFoundReason, `has no key "kubeconfig"`)

		By("refusing a key that holds no kubeconfig, or one with a credential plugin")
		setSecretData(kubeconfigSecret, "kubeconfig", []byte("not a kubeconfig"))
		expectNoEngineFor(key, autoscalingv1alpha1.InvalidWorkloadKubeconfigReason, "invalid kubeconfig in Secret "+fixture.Namespace+"/autoscaler-kubeconfig")
		setSecretData(kubeconfigSecret, "kubeconfig", kubeconfigFor(&clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{Command: "get-token", APIVersion: "client.authentication.k8s.io/v1", InteractiveMode: clientcmdapi.NeverExecInteractiveMode}}))
		expectNoEngineFor(key, autoscalingv1alpha1.InvalidWorkloadKubeconfigReason, "credential plugin")

		By("failing to connect as an identity without the workload role, though the Cluster's kubeconfig would work")
		nobody := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: fixture.Namespace, Name: "nobody"}}
		Expect(k8sClient.Create(ctx, nobody)).To(Succeed())
		lastAttempt := reconciler.ClusterCache.GetHealthCheckingState(ctx, cluster).LastProbeTime
		setSecretData(kubeconfigSecret, "kubeconfig", serviceAccountKubeconfig(client.ObjectKeyFromObject(nobody)).kubeconfig)
		expectNoEngineFor(key, autoscalingv1alpha1.WorkloadClusterUnreachableReason, "with the kubeconfig in Secret autoscaler-kubeconfig")
		// A failed connection counts as a failed probe.
		Eventually(func() time.Time {
			return reconciler.ClusterCache.GetHealthCheckingState(ctx, cluster).LastProbeTime
		}, reconnectTimeout).Should(BeTemporally(">", lastAttempt), "the ClusterCache tried to connect")
		_, err := reconciler.ClusterCache.GetRESTConfig(ctx, cluster)
		Expect(err).To(MatchError(clustercache.ErrClusterNotConnected), "connected, though not as the ServiceAccount without a role")

		By("running as the ServiceAccount of config/workload-rbac")
		autoscaler := serviceAccountKubeconfig(workloadServiceAccount)
		setSecretData(kubeconfigSecret, "kubeconfig", autoscaler.kubeconfig)
		expectEngineWithToken(key, autoscaler.token, reconnectTimeout)
	})

	It("picks up a rotated Cluster kubeconfig Secret without a restart, while the old credentials still work", func() {
		fixture := testenv.NewFixture(ctx, k8sClient)
		old := serviceAccountKubeconfig(workloadServiceAccount)
		provisionWorkloadCluster(fixture, old.kubeconfig)
		clusterKubeconfig := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: fixture.Namespace, Name: secret.Name(fixture.Cluster.Name, secret.Kubeconfig)}}
		key := createClusterAutoscaler(fixture)
		engine := expectEngineWithToken(key, old.token, waitTimeout)

		rotated := serviceAccountKubeconfig(workloadServiceAccount)
		setSecretData(clusterKubeconfig, secret.KubeconfigDataName, rotated.kubeconfig)
		Expect(expectEngineWithToken(key, rotated.token, reconnectTimeout)).To(BeIdenticalTo(engine), "the engine went on, with what it remembers")
	})

	It("picks up a rotated Secret of its own whose old credentials are revoked, and a change of the Secret it names", func() {
		fixture := newWorkloadCluster(env.Config.Host)
		old := serviceAccountKubeconfig(workloadServiceAccount)
		kubeconfigSecret := kubeconfigSecretFor(fixture.Cluster.Name, fixture.Namespace, "autoscaler-kubeconfig")
		setSecretData(kubeconfigSecret, secret.KubeconfigDataName, old.kubeconfig)
		key := createClusterAutoscalerWithKubeconfig(fixture, &autoscalingv1alpha1.WorkloadKubeconfigSecretReference{Name: kubeconfigSecret.Name})
		engine := expectEngineWithToken(key, old.token, waitTimeout)

		By("rotating the token and revoking the old one")
		rotated := serviceAccountKubeconfig(workloadServiceAccount)
		setSecretData(kubeconfigSecret, secret.KubeconfigDataName, rotated.kubeconfig)
		Expect(k8sClient.Delete(ctx, old.binding)).To(Succeed())
		Expect(expectEngineWithToken(key, rotated.token, reconnectTimeout)).To(BeIdenticalTo(engine), "the engine went on, with what it remembers")
		expectEngineWritesWith(engine, "the rotated credentials, the old ones being revoked")

		By("naming another Secret")
		next := serviceAccountKubeconfig(workloadServiceAccount)
		nextSecret := kubeconfigSecretFor(fixture.Cluster.Name, fixture.Namespace, "next-kubeconfig")
		setSecretData(nextSecret, "config", next.kubeconfig)
		ca := getClusterAutoscaler(Default, key)
		original := ca.DeepCopy()
		ca.Spec.WorkloadKubeconfigSecretRef = &autoscalingv1alpha1.WorkloadKubeconfigSecretReference{Name: nextSecret.Name, Key: "config"}
		Expect(k8sClient.Patch(ctx, ca, client.MergeFrom(original))).To(Succeed())
		Expect(expectEngineWithToken(key, next.token, reconnectTimeout)).To(BeIdenticalTo(engine))
		Expect(k8sClient.Delete(ctx, rotated.binding)).To(Succeed())
		expectEngineWritesWith(engine, "the credentials of the Secret named now, the others being revoked")
	})
})

// expectEngineWritesWith waits until a write of the engine, through the
// transport its workload clients use, is accepted by the workload cluster:
// the engine writes with the credentials of its connection now.
func expectEngineWritesWith(engine *runningEngine, what string) {
	GinkgoHelper()
	clientset, err := kubernetes.NewForConfig(clientConfig(engine.restConfig, engine.credentials))
	Expect(err).NotTo(HaveOccurred())
	Eventually(func() error {
		_, err := clientset.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		return err
	}, waitTimeout).Should(Succeed(), "the engine writes with %s", what)
}

// workloadServiceAccount is the ServiceAccount of config/workload-rbac: who
// the autoscaler is in a workload cluster.
var workloadServiceAccount = client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: "capi-autoscaler"}

// installWorkloadRBAC creates config/workload-rbac, workloadServiceAccount
// and its roles, in the envtest API server, the workload cluster of these
// tests.
func installWorkloadRBAC() {
	GinkgoHelper()
	objects, err := kustomize.Build(filepath.Join("..", "..", "config", "workload-rbac"))
	Expect(err).NotTo(HaveOccurred())
	for _, obj := range objects {
		Expect(k8sClient.Create(ctx, obj)).To(Succeed(), "%s %s", obj.GetKind(), obj.GetName())
	}
}

// serviceAccountIdentity is a kubeconfig for the envtest API server with a
// token of a ServiceAccount.
type serviceAccountIdentity struct {
	kubeconfig []byte
	token      string
	// binding is the Secret the token is bound to: deleting it revokes
	// the token.
	binding *corev1.Secret
}

// serviceAccountKubeconfig returns a kubeconfig with a new token of the
// ServiceAccount.
func serviceAccountKubeconfig(serviceAccount client.ObjectKey) serviceAccountIdentity {
	GinkgoHelper()
	binding := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: serviceAccount.Namespace, GenerateName: "token-binding-"}}
	Expect(k8sClient.Create(ctx, binding)).To(Succeed())
	tokenRequest := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: binding.Name, UID: binding.UID},
		ExpirationSeconds: ptr.To[int64](3600),
	}}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: serviceAccount.Namespace, Name: serviceAccount.Name}}
	Expect(k8sClient.SubResource("token").Create(ctx, sa, tokenRequest)).To(Succeed())
	token := tokenRequest.Status.Token
	return serviceAccountIdentity{kubeconfig: kubeconfigFor(&clientcmdapi.AuthInfo{Token: token}), token: token, binding: binding}
}

// kubeconfigFor is a kubeconfig for the envtest API server as user.
func kubeconfigFor(user *clientcmdapi.AuthInfo) []byte {
	GinkgoHelper()
	config := clientcmdapi.NewConfig()
	config.Clusters["envtest"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	config.AuthInfos["user"] = user
	config.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "user"}
	config.CurrentContext = "envtest"
	data, err := clientcmd.Write(*config)
	Expect(err).NotTo(HaveOccurred())
	return data
}

// setSecretData sets one key of a Secret, creating the Secret if needed.
// kubeconfigSecretFor is an empty Secret that spec.workloadKubeconfigSecretRef
// may name for the Cluster: of Cluster API's type, labelled with the
// Cluster's name.
func kubeconfigSecretFor(cluster, namespace, name string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: cluster}},
		Type:       clusterv1.ClusterSecretType,
	}
}

func setSecretData(s *corev1.Secret, key string, value []byte) {
	GinkgoHelper()
	current := &corev1.Secret{}
	err := k8sClient.Get(ctx, client.ObjectKeyFromObject(s), current)
	if apierrors.IsNotFound(err) {
		s.Data = map[string][]byte{key: value}
		Expect(k8sClient.Create(ctx, s)).To(Succeed())
		return
	}
	Expect(err).NotTo(HaveOccurred())
	current.Data = map[string][]byte{key: value}
	Expect(k8sClient.Update(ctx, current)).To(Succeed())
}

// createClusterAutoscalerWithKubeconfig creates a ClusterAutoscaler for the
// fixture's Cluster, looping every second, that reaches it with the
// kubeconfig ref names.
func createClusterAutoscalerWithKubeconfig(fixture *testenv.Fixture, ref *autoscalingv1alpha1.WorkloadKubeconfigSecretReference) types.NamespacedName {
	GinkgoHelper()
	ca := &autoscalingv1alpha1.ClusterAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: fixture.Namespace, Name: "autoscaler"},
		Spec: autoscalingv1alpha1.ClusterAutoscalerSpec{
			ClusterName:                 fixture.Cluster.Name,
			ScanInterval:                &metav1.Duration{Duration: time.Second},
			WorkloadKubeconfigSecretRef: ref,
		},
	}
	Expect(k8sClient.Create(ctx, ca)).To(Succeed())
	return client.ObjectKeyFromObject(ca)
}

// expectNoEngineFor waits until the ClusterAutoscaler reports that it runs
// no engine, for reason, with a message that contains message.
func expectNoEngineFor(key types.NamespacedName, reason, message string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		ready := conditions.Get(getClusterAutoscaler(g, key), autoscalingv1alpha1.ReadyCondition)
		g.Expect(ready).To(haveStatusAndReason(metav1.ConditionFalse, reason))
		g.Expect(ready.Message).To(ContainSubstring(message))
	}, waitTimeout).Should(Succeed())
	Expect(reconciler.engines.get(key)).To(BeNil())
}

// expectEngineWithToken waits until the engine of the ClusterAutoscaler
// runs on a connection that authenticates with token, and loops; it
// returns the engine.
func expectEngineWithToken(key types.NamespacedName, token string, timeout time.Duration) *runningEngine {
	GinkgoHelper()
	var engine *runningEngine
	Eventually(func(g Gomega) {
		engine = reconciler.engines.get(key)
		g.Expect(engine).NotTo(BeNil())
		connection, err := reconciler.ClusterCache.GetRESTConfig(ctx, engine.cluster)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(connection.BearerToken).To(Equal(token), "the connection's token")
		g.Expect(connection.CertData).To(BeEmpty(), "the connection's client certificate")
		g.Expect(engine.restConfig).To(BeIdenticalTo(connection), "the engine's connection")
	}, timeout).Should(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(getClusterAutoscaler(g, key).Status.LastLoopTime).NotTo(BeNil())
	}, waitTimeout).Should(Succeed())
	expectAnotherLoop(key)
	// An engine that went on through a reconnect wrote the failed loops of
	// the gap: the status shows the next loop's success once written.
	Eventually(func(g Gomega) {
		g.Expect(conditions.Get(getClusterAutoscaler(g, key), autoscalingv1alpha1.ReadyCondition)).To(haveStatusAndReason(metav1.ConditionTrue, autoscalingv1alpha1.RunningReason))
	}, waitTimeout).Should(Succeed())
	return engine
}

// A running engine's kubeconfig is read at most every
// workloadKubeconfigCheckInterval, not at every loop: under pod churn a
// loop comes every second for each cluster, and each read is a request to
// the management API server. A rotation is still seen within the interval,
// and a change of the Secret named at once.
func TestARunningEngineReadsItsKubeconfigAtMostEveryCheckInterval(t *testing.T) {
	g := NewWithT(t)
	scheme := runtime.NewScheme()
	g.Expect(autoscalingv1alpha1.AddToScheme(scheme)).To(Succeed())
	g.Expect(corev1.AddToScheme(scheme)).To(Succeed())
	kubeconfigWithToken := func(token string) []byte {
		config := clientcmdapi.NewConfig()
		config.Clusters["workload"] = &clientcmdapi.Cluster{Server: "https://workload.example:6443"}
		config.AuthInfos["autoscaler"] = &clientcmdapi.AuthInfo{Token: token}
		config.Contexts["workload"] = &clientcmdapi.Context{Cluster: "workload", AuthInfo: "autoscaler"}
		config.CurrentContext = "workload"
		data, err := clientcmd.Write(*config)
		g.Expect(err).NotTo(HaveOccurred())
		return data
	}
	first, second := kubeconfigSecretFor("workload", "ns", "first"), kubeconfigSecretFor("workload", "ns", "second")
	first.Data = map[string][]byte{secret.KubeconfigDataName: kubeconfigWithToken("one")}
	second.Data = map[string][]byte{secret.KubeconfigDataName: kubeconfigWithToken("two")}
	var secretReads int
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(first, second).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, isSecret := obj.(*corev1.Secret); isSecret {
				secretReads++
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}).Build()
	clock := clocktesting.NewFakeClock(time.Now())
	recorder := record.NewFakeRecorder(10)
	r := &ClusterAutoscalerReconciler{Client: c, Clock: clock, Recorder: recorder, WorkloadKubeconfigs: NewWorkloadKubeconfigs(c),
		ClusterCache: connectedWith{config: &rest.Config{Host: "https://workload.example:6443", BearerToken: "one"}}}
	ca := &autoscalingv1alpha1.ClusterAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "autoscaler"},
		Spec: autoscalingv1alpha1.ClusterAutoscalerSpec{ClusterName: "workload",
			WorkloadKubeconfigSecretRef: &autoscalingv1alpha1.WorkloadKubeconfigSecretReference{Name: first.Name}},
	}
	r.engines.put(client.ObjectKeyFromObject(ca), &runningEngine{})
	cluster := clusterKey(ca)
	reconcileEverySecondFor := func(d time.Duration) {
		for end := clock.Now().Add(d); clock.Now().Before(end); clock.Step(time.Second) {
			usable, err := r.reconcileWorkloadKubeconfig(context.Background(), newReconcileScope(ca))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(usable).To(BeTrue())
		}
	}

	reconcileEverySecondFor(workloadKubeconfigCheckInterval)
	g.Expect(secretReads).To(Equal(1), "ten loops in ten seconds read the kubeconfig once")

	rotated := first.DeepCopy()
	rotated.Data[secret.KubeconfigDataName] = kubeconfigWithToken("rotated")
	g.Expect(c.Update(context.Background(), rotated)).To(Succeed())
	reconcileEverySecondFor(workloadKubeconfigCheckInterval)
	g.Expect(secretReads).To(Equal(2))
	g.Expect(r.WorkloadKubeconfigs.takeReconnect(cluster)).To(BeTrue(), "the rotation is seen within the interval")
	g.Expect(recorder.Events).To(Receive(ContainSubstring("WorkloadKubeconfigChanged")))

	ca.Spec.WorkloadKubeconfigSecretRef.Name = second.Name
	reconcileEverySecondFor(time.Second)
	g.Expect(secretReads).To(Equal(3), "another Secret named is read at once")
	g.Expect(r.WorkloadKubeconfigs.takeReconnect(cluster)).To(BeTrue())
}

// spec.workloadKubeconfigSecretRef is used only for a Secret meant as the
// Cluster's kubeconfig, of Cluster API's type and labelled with the
// Cluster's name: whoever may create a ClusterAutoscaler cannot make the
// manager act with the credentials of any other Secret of the namespace,
// neither its engine nor the ClusterCache.
func TestOnlySecretsForTheClusterAreUsedAsItsKubeconfig(t *testing.T) {
	scheme := runtime.NewScheme()
	NewWithT(t).Expect(autoscalingv1alpha1.AddToScheme(scheme)).To(Succeed())
	NewWithT(t).Expect(corev1.AddToScheme(scheme)).To(Succeed())
	config := clientcmdapi.NewConfig()
	config.Clusters["workload"] = &clientcmdapi.Cluster{Server: "https://workload.example:6443"}
	config.AuthInfos["autoscaler"] = &clientcmdapi.AuthInfo{Token: "token"}
	config.Contexts["workload"] = &clientcmdapi.Context{Cluster: "workload", AuthInfo: "autoscaler"}
	config.CurrentContext = "workload"
	data, err := clientcmd.Write(*config)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())

	for _, tt := range []struct {
		name        string
		secret      func(*corev1.Secret)
		wantMessage string
	}{
		{name: "an Opaque Secret", secret: func(s *corev1.Secret) { s.Type = corev1.SecretTypeOpaque },
			wantMessage: `the Secret ns/credentials is of type "Opaque": a workload kubeconfig Secret is of type "cluster.x-k8s.io/secret"`},
		{name: "a Secret of another Cluster", secret: func(s *corev1.Secret) { s.Labels[clusterv1.ClusterNameLabel] = "other" },
			wantMessage: "the Secret ns/credentials is not labelled cluster.x-k8s.io/cluster-name=workload"},
		{name: "an unlabelled Secret", secret: func(s *corev1.Secret) { s.Labels = nil },
			wantMessage: "the Secret ns/credentials is not labelled cluster.x-k8s.io/cluster-name=workload"},
		{name: "a Secret for the Cluster", secret: func(*corev1.Secret) {}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			credentials := kubeconfigSecretFor("workload", "ns", "credentials")
			credentials.Data = map[string][]byte{secret.KubeconfigDataName: data}
			tt.secret(credentials)
			ca := &autoscalingv1alpha1.ClusterAutoscaler{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "autoscaler"},
				Spec: autoscalingv1alpha1.ClusterAutoscalerSpec{ClusterName: "workload",
					WorkloadKubeconfigSecretRef: &autoscalingv1alpha1.WorkloadKubeconfigSecretReference{Name: credentials.Name}},
			}
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(credentials, ca).
				WithIndex(&autoscalingv1alpha1.ClusterAutoscaler{}, clusterNameField, indexByClusterName).Build()
			r := &ClusterAutoscalerReconciler{Client: c, Clock: clocktesting.NewFakeClock(time.Now()), Recorder: record.NewFakeRecorder(10),
				WorkloadKubeconfigs: NewWorkloadKubeconfigs(c), ClusterCache: connectedWith{config: &rest.Config{Host: "https://workload.example:6443", BearerToken: "token"}}}

			s := newReconcileScope(ca)
			usable, err := r.reconcileWorkloadKubeconfig(context.Background(), s)
			g.Expect(err).NotTo(HaveOccurred())
			fromClusterCache := r.WorkloadKubeconfigs.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: secret.Name("workload", secret.Kubeconfig)}, &corev1.Secret{})
			if tt.wantMessage == "" {
				g.Expect(usable).To(BeTrue())
				g.Expect(fromClusterCache).To(Succeed())
				return
			}
			g.Expect(usable).To(BeFalse())
			g.Expect(s.stopped).NotTo(BeNil())
			g.Expect(s.stopped.reason).To(Equal(autoscalingv1alpha1.InvalidWorkloadKubeconfigReason))
			g.Expect(s.stopped.message).To(ContainSubstring(tt.wantMessage))
			g.Expect(fromClusterCache).To(MatchError(ContainSubstring(tt.wantMessage)), "the ClusterCache does not connect with it either")
		})
	}
}

// A DryRun ClusterAutoscaler beside the Active one that owns the Cluster
// reaches the Cluster through the owner's connection: its own kubeconfig,
// another Secret, the Cluster's own, or none at all, never has the
// ClusterCache connect again, which would restart the owner's engine and
// forget its drains and timers at every check; a problem with its Secret
// stops only its own engine, and says so on its own conditions.
func TestADryRunBesideTheOwnerNeverReconnectsTheCluster(t *testing.T) {
	scheme := runtime.NewScheme()
	NewWithT(t).Expect(autoscalingv1alpha1.AddToScheme(scheme)).To(Succeed())
	NewWithT(t).Expect(corev1.AddToScheme(scheme)).To(Succeed())
	kubeconfigWithToken := func(g Gomega, token string) []byte {
		config := clientcmdapi.NewConfig()
		config.Clusters["workload"] = &clientcmdapi.Cluster{Server: "https://workload.example:6443"}
		config.AuthInfos["autoscaler"] = &clientcmdapi.AuthInfo{Token: token}
		config.Contexts["workload"] = &clientcmdapi.Context{Cluster: "workload", AuthInfo: "autoscaler"}
		config.CurrentContext = "workload"
		data, err := clientcmd.Write(*config)
		g.Expect(err).NotTo(HaveOccurred())
		return data
	}
	owner := &autoscalingv1alpha1.ClusterAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "active"},
		Spec: autoscalingv1alpha1.ClusterAutoscalerSpec{ClusterName: "workload",
			WorkloadKubeconfigSecretRef: &autoscalingv1alpha1.WorkloadKubeconfigSecretReference{Name: "narrow"}},
	}
	for _, tt := range []struct {
		name       string
		secretRef  *autoscalingv1alpha1.WorkloadKubeconfigSecretReference
		wantUsable bool
		wantReason string
	}{
		{name: "another Secret", secretRef: &autoscalingv1alpha1.WorkloadKubeconfigSecretReference{Name: "trial"}, wantUsable: true},
		{name: "the Cluster's own kubeconfig", wantUsable: true},
		{name: "a Secret that does not exist", secretRef: &autoscalingv1alpha1.WorkloadKubeconfigSecretReference{Name: "misspelt"},
			wantReason: autoscalingv1alpha1.WorkloadKubeconfigNotFoundReason},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			narrow, trial := kubeconfigSecretFor("workload", "ns", "narrow"), kubeconfigSecretFor("workload", "ns", "trial")
			narrow.Data = map[string][]byte{secret.KubeconfigDataName: kubeconfigWithToken(g, "narrow")}
			trial.Data = map[string][]byte{secret.KubeconfigDataName: kubeconfigWithToken(g, "trial")}
			admin := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: secret.Name("workload", secret.Kubeconfig)}, Data: map[string][]byte{secret.KubeconfigDataName: kubeconfigWithToken(g, "admin")}}
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(narrow, trial, admin).Build()
			clock := clocktesting.NewFakeClock(time.Now())
			r := &ClusterAutoscalerReconciler{Client: c, Clock: clock, Recorder: record.NewFakeRecorder(100), WorkloadKubeconfigs: NewWorkloadKubeconfigs(c),
				ClusterCache: connectedWith{config: &rest.Config{Host: "https://workload.example:6443", BearerToken: "narrow"}}}
			dryRun := &autoscalingv1alpha1.ClusterAutoscaler{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "trial"},
				Spec:       autoscalingv1alpha1.ClusterAutoscalerSpec{ClusterName: "workload", Mode: autoscalingv1alpha1.DryRunMode, WorkloadKubeconfigSecretRef: tt.secretRef},
			}
			if tt.wantUsable {
				r.engines.put(client.ObjectKeyFromObject(dryRun), &runningEngine{})
			}

			for end := clock.Now().Add(time.Minute); clock.Now().Before(end); clock.Step(time.Second) {
				s := newReconcileScope(dryRun)
				s.otherOwner = owner
				usable, err := r.reconcileWorkloadKubeconfig(context.Background(), s)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(usable).To(Equal(tt.wantUsable))
				if tt.wantReason != "" {
					g.Expect(s.stopped).NotTo(BeNil())
					g.Expect(s.stopped.reason).To(Equal(tt.wantReason), "the DryRun ClusterAutoscaler says what is wrong with its Secret")
				}
				g.Expect(r.WorkloadKubeconfigs.takeReconnect(clusterKey(dryRun))).To(BeFalse(), "at %s, the owner's connection is kept", clock.Now().Format(time.TimeOnly))
			}
		})
	}
}

// connectedWith is a ClusterCache connected to every workload cluster with
// one REST config.
type connectedWith struct {
	clustercache.ClusterCache
	config *rest.Config
}

func (c connectedWith) GetRESTConfig(context.Context, client.ObjectKey) (*rest.Config, error) {
	return c.config, nil
}

// A ClusterAutoscaler in a namespace where a narrower install did not bind
// the manager's namespace role (docs/reference/permissions.md) says so on its own
// conditions, whichever Secret holds its kubeconfig, and nothing of its
// Cluster is touched: no engine, and no contending for the Cluster's
// Lease, which the manager may not write there either and would report as
// held by another manager.
func TestANamespaceWithoutTheManagersNamespaceRoleSaysSo(t *testing.T) {
	scheme := runtime.NewScheme()
	NewWithT(t).Expect(autoscalingv1alpha1.AddToScheme(scheme)).To(Succeed())
	NewWithT(t).Expect(corev1.AddToScheme(scheme)).To(Succeed())
	for _, tt := range []struct {
		name string
		ref  *autoscalingv1alpha1.WorkloadKubeconfigSecretReference
	}{
		{name: "the Cluster's own kubeconfig"},
		{name: "a Secret the ClusterAutoscaler names", ref: &autoscalingv1alpha1.WorkloadKubeconfigSecretReference{Name: "credentials"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			ca := &autoscalingv1alpha1.ClusterAutoscaler{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "autoscaler"},
				Spec:       autoscalingv1alpha1.ClusterAutoscalerSpec{ClusterName: "workload", WorkloadKubeconfigSecretRef: tt.ref},
			}
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(ca).WithInterceptorFuncs(interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if _, isSecret := obj.(*corev1.Secret); isSecret {
						return apierrors.NewForbidden(corev1.Resource("secrets"), key.Name,
							errors.New(`User "system:serviceaccount:capi-autoscaler-system:capi-autoscaler-controller-manager" cannot get resource "secrets"`))
					}
					return c.Get(ctx, key, obj, opts...)
				},
			}).Build()
			recorder := record.NewFakeRecorder(10)
			r := &ClusterAutoscalerReconciler{Client: c, Clock: clocktesting.NewFakeClock(time.Now()), Recorder: recorder,
				WorkloadKubeconfigs: NewWorkloadKubeconfigs(c), ClusterCache: connectedWith{config: &rest.Config{Host: "https://workload.example:6443", BearerToken: "token"}}}

			s := newReconcileScope(ca)
			usable, err := r.reconcileWorkloadKubeconfig(context.Background(), s)
			g.Expect(err).NotTo(HaveOccurred(), "the condition says it; retrying at once cannot fix RBAC")
			g.Expect(usable).To(BeFalse(), "nothing goes on to the Cluster's Lease and engine")
			g.Expect(s.stopped).NotTo(BeNil())
			g.Expect(s.stopped.reason).To(Equal(autoscalingv1alpha1.WorkloadKubeconfigForbiddenReason))
			g.Expect(s.stopped.message).To(And(ContainSubstring("namespace ns"), ContainSubstring("manager-namespace-role"), ContainSubstring("forbidden")))
			g.Expect(recorder.Events).To(Receive(ContainSubstring(autoscalingv1alpha1.WorkloadKubeconfigForbiddenReason)))
		})
	}
}
