package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/spf13/cobra"
)

func TestACommandLoadsTheKubeconfigOnce(t *testing.T) {
	g := NewWithT(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	g.Expect(os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters:
- name: management
  cluster: {server: "https://127.0.0.1:6443"}
contexts:
- name: management
  context: {cluster: management, namespace: clusters, user: admin}
current-context: management
users:
- name: admin
  user: {token: secret}
`), 0o600)).To(Succeed())

	var namespace string
	command := func(o *Options) *cobra.Command {
		return &cobra.Command{Use: "both", RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if namespace, _, err = o.Namespace(cmd); err != nil {
				return err
			}
			// Gone: the client is made of the kubeconfig the namespace was read from.
			if err := os.Remove(kubeconfig); err != nil {
				return err
			}
			_, err = o.Client()
			return err
		}}
	}
	var out bytes.Buffer
	root := NewRootCommand(Streams{Out: &out, ErrOut: &out}, time.Now, command)
	root.SetArgs([]string{"--kubeconfig", kubeconfig, "both"})
	g.Expect(root.Execute()).To(Succeed())
	g.Expect(namespace).To(Equal("clusters"))
}

func TestClusterScopeIsNamespaceSlashNameOrName(t *testing.T) {
	for _, tt := range []struct {
		cluster string
		want    Scope
		wantErr bool
	}{
		{cluster: "prod", want: Scope{Namespace: "clusters", Cluster: "prod"}},
		{cluster: "", want: Scope{Namespace: "clusters"}},
		{cluster: "team-a/prod", want: Scope{Namespace: "team-a", Cluster: "prod"}},
		{cluster: "/prod", wantErr: true},
		{cluster: "team-a/", wantErr: true},
		{cluster: "team-a/prod/x", wantErr: true},
	} {
		t.Run(tt.cluster, func(t *testing.T) {
			g := NewWithT(t)
			scope, err := ClusterScope(tt.cluster, "clusters")
			if tt.wantErr {
				g.Expect(err).To(MatchError(`a Cluster is namespace/name or name, not "` + tt.cluster + `"`))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(scope).To(Equal(tt.want))
		})
	}
}
