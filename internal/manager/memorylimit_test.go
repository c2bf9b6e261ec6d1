package manager

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestGoMemoryLimitIsAShareOfTheContainerLimitUnlessGOMEMLIMITIsSet(t *testing.T) {
	const limit1Gi = "1073741824"
	tests := []struct {
		name    string
		percent int
		env     map[string]string
		want    int64
		wantErr string
	}{
		{name: "90% of a 1Gi limit", percent: 90, env: map[string]string{memoryLimitEnv: limit1Gi}, want: 966367620},
		{name: "GOMEMLIMIT set wins", percent: 90, env: map[string]string{memoryLimitEnv: limit1Gi, "GOMEMLIMIT": "500MiB"}, want: 0},
		{name: "no container limit known, as when run outside a pod", percent: 90, want: 0},
		{name: "0 sets none", percent: 0, env: map[string]string{memoryLimitEnv: limit1Gi}, want: 0},
		{name: "not bytes", percent: 90, env: map[string]string{memoryLimitEnv: "1Gi"}, wantErr: `MEMORY_LIMIT="1Gi" is not the container's memory limit in bytes`},
		{name: "a percentage past 100", percent: 120, env: map[string]string{memoryLimitEnv: limit1Gi}, wantErr: "between 0 and 100"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			lookupEnv := func(name string) (string, bool) {
				value, set := tt.env[name]
				return value, set
			}
			got, err := goMemoryLimit(tt.percent, lookupEnv)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
		})
	}
}
