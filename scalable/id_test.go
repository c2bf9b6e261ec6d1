package scalable

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestParseIDReadsWhatIDWrites(t *testing.T) {
	tests := []struct {
		id                    string
		kind, namespace, name string
		ok                    bool
	}{
		{id: ID(KindMachineDeployment, "default", "md-0"), kind: KindMachineDeployment, namespace: "default", name: "md-0", ok: true},
		{id: ID(KindMachineSet, "team-a", "ms"), kind: KindMachineSet, namespace: "team-a", name: "ms", ok: true},
		{id: "MachineDeployment/default"},
		{id: "MachineDeployment//md-0"},
		{id: "MachineDeployment/default/md-0/extra"},
		{id: ""},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			kind, namespace, name, ok := ParseID(tt.id)
			NewWithT(t).Expect([]any{kind, namespace, name, ok}).To(Equal([]any{tt.kind, tt.namespace, tt.name, tt.ok}))
		})
	}
}
