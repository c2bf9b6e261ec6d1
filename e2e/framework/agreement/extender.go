package agreement

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// filterVerb is the path of the extender's filter call.
const filterVerb = "filter"

// heldBack is why the extender fails every node.
const heldBack = "held back by the agreement harness"

// extender is a kube-scheduler filter extender. kube-scheduler calls it
// with the nodes that passed every in-tree filter: it records them as the
// pod's feasible nodes and fails them all, so that no pod is ever bound
// and every pod is judged against the same cluster.
type extender struct {
	server   *http.Server
	listener net.Listener
	mu       sync.Mutex
	feasible map[types.UID][]string
	served   chan error
}

// startExtender serves the extender on a free local port.
func startExtender() (*extender, error) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e := &extender{listener: listener, feasible: map[types.UID][]string{}, served: make(chan error, 1)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /"+filterVerb, e.filter)
	e.server = &http.Server{Handler: mux}
	go func() { e.served <- e.server.Serve(listener) }()
	return e, nil
}

// url is the extender's URL prefix.
func (e *extender) url() string { return "http://" + e.listener.Addr().String() }

func (e *extender) filter(w http.ResponseWriter, r *http.Request) {
	var args extenderv1.ExtenderArgs
	if err := json.NewDecoder(r.Body).Decode(&args); err != nil || args.Pod == nil || args.NodeNames == nil {
		http.Error(w, "expected a pod and node names (nodeCacheCapable)", http.StatusBadRequest)
		return
	}
	nodes := *args.NodeNames
	e.mu.Lock()
	e.feasible[args.Pod.UID] = nodes
	e.mu.Unlock()
	failed := make(extenderv1.FailedNodesMap, len(nodes))
	for _, node := range nodes {
		failed[node] = heldBack
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&extenderv1.ExtenderFilterResult{NodeNames: &[]string{}, FailedNodes: failed})
}

// feasibleNodes returns the nodes kube-scheduler found feasible for a pod,
// and whether it called the extender for it: it does not when no node
// passed its filters.
func (e *extender) feasibleNodes(uid types.UID) ([]string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	nodes, called := e.feasible[uid]
	return nodes, called
}

func (e *extender) stop() error {
	err := e.server.Close()
	if served := <-e.served; !errors.Is(served, http.ErrServerClosed) {
		err = errors.Join(err, served)
	}
	return err
}
