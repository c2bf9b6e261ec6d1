package snapshot

import (
	"fmt"
	"math/rand/v2"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// rebuiltList is the visible nodes of layer i built from scratch from the
// layers: what the patched lists must always equal.
func rebuiltList(s *Snapshot, i int) []*NodeInfo {
	l := s.layers[i]
	var list []*NodeInfo
	if i > 0 {
		for _, info := range rebuiltList(s, i-1) {
			if l.deleted[info.Name()] {
				continue
			}
			if own, ok := l.nodes[info.Name()]; ok {
				info = own
			}
			list = append(list, info)
		}
	}
	for _, name := range l.added {
		list = append(list, l.nodes[name])
	}
	return list
}

// nodeCopies names the nodes of a list and tells the copies of a node apart.
func nodeCopies(list []*NodeInfo) []string {
	names := []string{}
	for _, info := range list {
		names = append(names, fmt.Sprintf("%s@%p", info.Name(), info))
	}
	return names
}

func TestPatchedListsMatchRebuiltOnes(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4, 5, 6, 7, 8} {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			g := NewWithT(t)
			random := rand.New(rand.NewPCG(seed, seed))
			node := func(name string) *corev1.Node { return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}} }
			var nodes []*corev1.Node
			for i := range 6 {
				nodes = append(nodes, node(fmt.Sprintf("n%d", i)))
			}
			s := New(Input{Nodes: nodes})
			// Names come back, so that removed nodes are added again.
			names := []string{"n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8"}
			pods := 0
			for step := range 400 {
				visible := s.NodeInfos()
				switch op := random.IntN(7); {
				case op == 0 && len(s.layers) < 5:
					s.Fork()
				case op == 1:
					s.Revert()
				case op == 2:
					s.Commit()
				case op == 3:
					_ = s.AddNode(NewNodeInfo(node(names[random.IntN(len(names))])))
				case op == 4 && len(visible) > 0:
					g.Expect(s.RemoveNode(visible[random.IntN(len(visible))].Name())).To(Succeed())
				case len(visible) > 0:
					pods++
					pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", pods)}}
					g.Expect(s.AddPod(NewPodInfo(pod), visible[random.IntN(len(visible))].Name())).To(Succeed())
				}
				for i, l := range s.layers {
					if l.list != nil || i == len(s.layers)-1 {
						g.Expect(nodeCopies(s.list(i))).To(Equal(nodeCopies(rebuiltList(s, i))), "layer %d after step %d", i, step)
					}
				}
			}
		})
	}
}
