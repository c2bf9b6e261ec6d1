package convert

import (
	"testing"

	. "github.com/onsi/gomega"
)

// A Deployment, Pod or other workload gives the command line of its
// cluster-autoscaler container, its image, and the Secrets of its files.
func TestReadDeployment(t *testing.T) {
	tests := []struct {
		name          string
		yaml          string
		container     string
		wantArgs      []string
		wantImage     string
		wantWarnings  []string
		wantSecrets   map[string]secretFile
		wantNoSecrets []string
		wantErr       string
	}{
		{
			name: "a Pod in a List, args only: the image's entrypoint is the program",
			yaml: `{"apiVersion": "v1", "kind": "List", "items": [
  {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ca", "namespace": "kube-system"},
   "spec": {"containers": [{"name": "ca", "image": "registry.k8s.io/autoscaling/cluster-autoscaler:v1.30.0", "args": ["--cloud-provider=clusterapi"]}]}}]}`,
			wantArgs:  []string{"/cluster-autoscaler", "--cloud-provider=clusterapi"},
			wantImage: "registry.k8s.io/autoscaling/cluster-autoscaler:v1.30.0",
		},
		{
			name: "a sidecar beside it, a shell around it, and variables it does not write",
			yaml: `apiVersion: apps/v1
kind: StatefulSet
metadata: {name: ca, namespace: clusters}
spec:
  template:
    spec:
      containers:
      - name: proxy
        image: envoyproxy/envoy:v1.30.0
      - name: autoscaler
        image: example.com/mirror/autoscaler:v1.31.0
        command: [/bin/sh, -c, "exec /cluster-autoscaler --cloud-provider=clusterapi --node-group-auto-discovery='clusterapi:clusterName=prod'"]
        env:
        - {name: CAPI_GROUP, value: cluster.x-k8s.io}
`,
			wantArgs:     []string{"/cluster-autoscaler", "--cloud-provider=clusterapi", "--node-group-auto-discovery=clusterapi:clusterName=prod"},
			wantImage:    "example.com/mirror/autoscaler:v1.31.0",
			wantWarnings: []string{"the container sets CAPI_GROUP=cluster.x-k8s.io: capi-autoscaler works with the Cluster API group and version it is built for"},
		},
		{
			name: "variables from a Secret stay as written",
			yaml: `apiVersion: apps/v1
kind: Deployment
metadata: {name: ca}
spec:
  template:
    spec:
      containers:
      - name: cluster-autoscaler
        image: cluster-autoscaler
        command: [/cluster-autoscaler, "--node-group-auto-discovery=clusterapi:clusterName=$(CLUSTER)"]
        env:
        - name: CLUSTER
          valueFrom: {secretKeyRef: {name: s, key: k}}
`,
			wantArgs:     []string{"/cluster-autoscaler", "--node-group-auto-discovery=clusterapi:clusterName=$(CLUSTER)"},
			wantImage:    "cluster-autoscaler",
			wantWarnings: []string{`"--node-group-auto-discovery=clusterapi:clusterName=$(CLUSTER)" uses $(CLUSTER), whose value is not written in the container: it is converted as written`},
		},
		{
			name: "files of Secret volumes: items, subPath and plain keys",
			yaml: `apiVersion: apps/v1
kind: Deployment
metadata: {name: ca, namespace: clusters}
spec:
  template:
    spec:
      containers:
      - name: cluster-autoscaler
        image: cluster-autoscaler
        args: [--cloud-provider=clusterapi]
        volumeMounts:
        - {name: items, mountPath: /items/}
        - {name: sub, mountPath: /etc/kubeconfig, subPath: config}
        - {name: plain, mountPath: /plain}
        - {name: config, mountPath: /config}
      volumes:
      - name: items
        secret: {secretName: prod-kubeconfig, items: [{key: value, path: kubeconfig}]}
      - name: sub
        secret: {secretName: narrow}
      - name: plain
        secret: {secretName: other}
      - name: config
        configMap: {name: cm}
`,
			wantArgs:  []string{"/cluster-autoscaler", "--cloud-provider=clusterapi"},
			wantImage: "cluster-autoscaler",
			wantSecrets: map[string]secretFile{
				"/items/kubeconfig":   {namespace: "clusters", name: "prod-kubeconfig", key: "value"},
				"/etc/kubeconfig":     {namespace: "clusters", name: "narrow", key: "config"},
				"/plain/./kubeconfig": {namespace: "clusters", name: "other", key: "kubeconfig"},
			},
			wantNoSecrets: []string{"/items/value", "/config/kubeconfig", "/plain/a/b", "/elsewhere"},
		},
		{
			name:      "the container named",
			yaml:      `{"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "a", "image": "x", "args": ["--v=1"]}, {"name": "b", "image": "y", "args": ["--v=2"]}]}}`,
			container: "b",
			wantArgs:  []string{"/cluster-autoscaler", "--v=2"},
			wantImage: "y",
		},
		{
			name: "two autoscalers",
			yaml: `{"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "a", "image": "cluster-autoscaler"}]}}
---
{"kind": "Pod", "metadata": {"name": "q"}, "spec": {"containers": [{"name": "b", "image": "cluster-autoscaler"}]}}`,
			wantErr: "several cluster-autoscaler containers (Pod p, container a; Pod q, container b)",
		},
		{
			name:    "not YAML",
			yaml:    "kind: [",
			wantErr: "reading deployment.yaml",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			in, err := readDeployment([]byte(tt.yaml), "deployment.yaml", tt.container)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(in.args).To(Equal(tt.wantArgs))
			g.Expect(in.image).To(Equal(tt.wantImage))
			g.Expect(in.warnings).To(Equal(tt.wantWarnings))
			for path, want := range tt.wantSecrets {
				got, ok := in.secretOf(path)
				g.Expect(ok).To(BeTrue(), path)
				g.Expect(got).To(Equal(want), path)
			}
			for _, path := range tt.wantNoSecrets {
				_, ok := in.secretOf(path)
				g.Expect(ok).To(BeFalse(), path)
			}
		})
	}
}
