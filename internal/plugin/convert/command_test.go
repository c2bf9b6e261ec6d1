package convert

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/cli"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/plugintest"
)

// The command prints the ClusterAutoscaler on stdout and the report on
// stderr, or as comments before the YAML.
func TestConvertCommand(t *testing.T) {
	dir := filepath.Join("testdata", "convert")
	tuned := strings.TrimSpace(string(convertTestdata(t, "tuned.args")))
	tests := []struct {
		name string
		args []string
	}{
		{name: "management-deployment", args: []string{"--from-deployment", filepath.Join(dir, "management-deployment.yaml")}},
		{name: "workload-deployment", args: []string{"--from-deployment", filepath.Join(dir, "workload-deployment.yaml"), "--name", "prod-autoscaler"}},
		{name: "tuned", args: []string{"--from-args", tuned, "--from-priority-config", filepath.Join(dir, "priority-expander.yaml"), "--mode", "Active"}},
		{name: "helm-kubeconfig", args: []string{"--from-helm-values", filepath.Join(dir, "helm-kubeconfig-values.yaml"), "--report", "comments"}},
		{name: "after-dash", args: []string{"-n", "clusters", "--cluster-name", "prod", "--",
			"--cloud-provider=clusterapi", "--nodes=0:5:md-0", "--scale-down-unneeded-time=5m", "--expander=priority"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			stdout, stderr, err := plugintest.RunPlugin(t, append([]string{"convert"}, tt.args...)...)
			g.Expect(err).NotTo(HaveOccurred(), stderr)
			plugintest.Golden(t, filepath.Join("convert", tt.name+".stdout"), stdout)
			plugintest.Golden(t, filepath.Join("convert", tt.name+".report"), stderr)

			var ca autoscalingv1alpha1.ClusterAutoscaler
			g.Expect(yaml.UnmarshalStrict([]byte(stdout), &ca)).To(Succeed())
			g.Expect(ca.Spec.ClusterName).To(Equal("prod"))
		})
	}
}

// --from-deployment - reads stdin, as from kubectl get -o yaml.
func TestConvertCommandReadsStdin(t *testing.T) {
	g := NewWithT(t)
	file, err := os.Open(filepath.Join("testdata", "convert", "management-deployment.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	defer file.Close()
	var out, errOut bytes.Buffer
	cmd := cli.NewRootCommand(cli.Streams{In: file, Out: &out, ErrOut: &errOut}, func() time.Time { return plugintest.TestNow }, NewCommand)
	cmd.SetArgs([]string{"convert", "--from-deployment", "-", "--report", "none"})
	g.Expect(cmd.ExecuteContext(context.Background())).To(Succeed())
	g.Expect(errOut.String()).To(BeEmpty())
	g.Expect(out.String()).To(Equal(string(convertTestdata(t, "management-deployment.stdout"))))
}

func TestConvertCommandRefuses(t *testing.T) {
	deployment := filepath.Join("testdata", "convert", "management-deployment.yaml")
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "no source", args: nil, wantErr: "give one of --from-deployment, --from-helm-values, --from-args, or the command line after --"},
		{name: "two sources", args: []string{"--from-deployment", deployment, "--from-args", "--v=1"}, wantErr: "give one of"},
		{name: "arguments without --", args: []string{"--from-args", "--v=1", "extra"}, wantErr: `the upstream command line follows --`},
		{name: "a bad mode", args: []string{"--from-deployment", deployment, "--mode", "Passive"}, wantErr: `--mode must be DryRun or Active, not "Passive"`},
		{name: "a bad report", args: []string{"--from-deployment", deployment, "--report", "yaml"}, wantErr: `--report must be stderr, comments or none`},
		{name: "a container without a Deployment", args: []string{"--from-args", "--v=1", "--container", "x"}, wantErr: "--container goes with --from-deployment"},
		{name: "no such container", args: []string{"--from-deployment", deployment, "--container", "x"}, wantErr: "has no container x"},
		{name: "no cluster-autoscaler", args: []string{"--from-deployment", filepath.Join("testdata", "convert", "priority-expander.yaml")}, wantErr: "has no cluster-autoscaler container"},
		{name: "a missing file", args: []string{"--from-helm-values", "no-such-values.yaml"}, wantErr: "no-such-values.yaml"},
		{name: "stdin without one", args: []string{"--from-deployment", "-"}, wantErr: "- reads stdin, which there is none of"},
		{name: "a bad priority ConfigMap", args: []string{"--from-deployment", deployment, "--from-priority-config", deployment}, wantErr: "has no key priorities"},
		{name: "warnings with --strict", args: []string{"--strict", "--", "--cloud-provider=clusterapi", "--node-group-auto-discovery=clusterapi:clusterName=prod", "--node-deletion-delay-timeout=0s", "--scan-interval=1"},
			wantErr: "--strict: 2 warnings (above); no ClusterAutoscaler printed"},
		{name: "upstream's default node deletion delay with --strict", args: []string{"--strict", "--", "--cloud-provider=clusterapi", "--node-group-auto-discovery=clusterapi:clusterName=prod,namespace=clusters"},
			wantErr: "--strict: 1 warnings (above); no ClusterAutoscaler printed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			stdout, _, err := plugintest.RunPlugin(t, append([]string{"convert"}, tt.args...)...)
			g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
			g.Expect(stdout).To(BeEmpty())
		})
	}
}
