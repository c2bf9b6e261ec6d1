package convert

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestSplitCommandLine(t *testing.T) {
	tests := []struct {
		line    string
		want    []string
		wantErr string
	}{
		{line: "  --a=1\t--b 2 ", want: []string{"--a=1", "--b", "2"}},
		{line: "./cluster-autoscaler \\\n  --v=4 \\\n  --expander=least-waste", want: []string{"./cluster-autoscaler", "--v=4", "--expander=least-waste"}},
		{line: `--balancing-ignore-label='a b' --x="c \"d\" $e" e\ f`, want: []string{"--balancing-ignore-label=a b", `--x=c "d" $e`, "e f"}},
		{line: `--a="" ''`, want: []string{"--a=", ""}},
		{line: `--a='x`, wantErr: "unterminated single quote"},
		{line: `--a="x`, wantErr: "unterminated double quote"},
		{line: `--a=x\`, wantErr: "ends with a backslash"},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			g := NewWithT(t)
			got, err := splitCommandLine(tt.line)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
		})
	}
}

// Flags are read as upstream's flag set reads them.
func TestParseUpstreamArgs(t *testing.T) {
	tests := []struct {
		name         string
		args         []string
		want         []upstreamFlag
		wantWarnings []string
	}{
		{
			name: "the program name is skipped; values follow = or come next",
			args: []string{"/cluster-autoscaler", "--scan-interval=10s", "--expander", "random"},
			want: []upstreamFlag{
				{name: "scan-interval", value: "10s", hasValue: true, written: "--scan-interval=10s"},
				{name: "expander", value: "random", hasValue: true, written: "--expander random"},
			},
		},
		{
			name: "a boolean takes no next argument, which is ignored as upstream ignores it",
			args: []string{"--scale-down-enabled", "false", "--balance-similar-node-groups=false"},
			want: []upstreamFlag{
				{name: "scale-down-enabled", written: "--scale-down-enabled"},
				{name: "balance-similar-node-groups", value: "false", hasValue: true, written: "--balance-similar-node-groups=false"},
			},
			wantWarnings: []string{`argument "false" after --scale-down-enabled ignored, as upstream ignores it: a boolean flag takes its value as --scale-down-enabled=false`},
		},
		{
			name: "underscores are dashes, and -v has one dash",
			args: []string{"--log_file=/x", "-v=4", "-scan-interval=5s"},
			want: []upstreamFlag{
				{name: "log-file", value: "/x", hasValue: true, written: "--log_file=/x"},
				{name: "v", value: "4", hasValue: true, written: "-v=4"},
				{name: "scan-interval", value: "5s", hasValue: true, written: "-scan-interval=5s"},
			},
			wantWarnings: []string{"-scan-interval=5s has a single dash: upstream reads only one-letter flags such as -v that way; read as --scan-interval=5s"},
		},
		{
			name: "a flag without a value, and arguments after --",
			args: []string{"--scan-interval", "--", "x"},
			want: []upstreamFlag{{name: "scan-interval", written: "--scan-interval"}},
			wantWarnings: []string{
				`argument "x" after -- ignored: cluster-autoscaler takes no arguments`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, warnings := parseUpstreamArgs(tt.args, flagsByName)
			g.Expect(got).To(Equal(tt.want))
			g.Expect(warnings).To(Equal(tt.wantWarnings))
		})
	}
}

func TestExpandEnv(t *testing.T) {
	g := NewWithT(t)
	env := map[string]string{"CLUSTER": "prod", "EMPTY": ""}
	got, missing := expandEnv("clusterName=$(CLUSTER),x=$(EMPTY)$(NAMESPACE),cost=$$(CLUSTER),$", env)
	g.Expect(got).To(Equal("clusterName=prod,x=$(NAMESPACE),cost=$(CLUSTER),$"))
	g.Expect(missing).To(Equal([]string{"NAMESPACE"}))
}

func TestUpstreamRelease(t *testing.T) {
	tests := []struct {
		version, image string
		wantMinor      int
		wantSays       string
	}{
		{version: "1.32", image: "registry.k8s.io/autoscaling/cluster-autoscaler:v1.34.0", wantMinor: 32, wantSays: "1.32 (--upstream-version)"},
		{version: "v1.30.2", wantMinor: 30, wantSays: "1.30 (--upstream-version)"},
		{image: "localhost:5000/autoscaling/cluster-autoscaler:v1.31.1@sha256:0123", wantMinor: 31, wantSays: "1.31 (the image tag v1.31.1)"},
		{image: "localhost:5000/cluster-autoscaler", wantSays: "1.34 or later"},
		{image: "cluster-autoscaler:latest", wantSays: "1.34 or later"},
	}
	for _, tt := range tests {
		t.Run(tt.version+tt.image, func(t *testing.T) {
			g := NewWithT(t)
			minor, says := upstreamRelease(tt.version, tt.image)
			if tt.wantMinor != 0 {
				g.Expect(minor).To(Equal(tt.wantMinor))
			} else {
				g.Expect(minor).To(BeNumerically(">", latestDefaultsChange()))
			}
			g.Expect(says).To(HavePrefix(tt.wantSays))
		})
	}
}
