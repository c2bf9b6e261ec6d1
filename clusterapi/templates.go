package clusterapi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultTemplateReadTimeout bounds each read of a node group's
// infrastructure template. The reads come from the manager's cache: at
// once when it holds the kind, within a second when the first read of a
// kind waits for its informer to list it. A read that takes longer waits
// for an informer that cannot sync, as when RBAC forbids listing a
// provider's kind outside infrastructure.cluster.x-k8s.io, and would hold
// the loop of the whole cluster until the loop timeout.
const DefaultTemplateReadTimeout = 10 * time.Second

// unansweredKindRetry is how long a kind whose read did not answer within
// the bound is not read again: a retry costs one loop the bound, and a
// fixed RBAC shows within it.
const unansweredKindRetry = 5 * time.Minute

// errTemplateReadTimedOut is the cause of the end of a template read at
// its bound, as opposed to the end of the loop.
var errTemplateReadTimedOut = errors.New("template read timed out")

// templateReader reads the infrastructure templates of node groups, and
// the CustomResourceDefinitions that give their versions, each read within
// a bound of its own, so that a read that hangs costs one group its scale
// from zero, not the cluster its loop.
//
// A cached read of a kind whose informer has not synced waits until it has
// or until its context ends; controller-runtime then returns and leaves no
// goroutine behind, while the kind's informer, one for the manager's
// lifetime, goes on retrying its list. So every later read of the kind
// would wait the whole bound again, in every loop, for as long as the
// cause lasts, usually missing RBAC that only a person adds. A kind that
// did not answer is therefore not read again for unansweredKindRetry, and
// its reads fail at once meanwhile, with the same message, so the group's
// problem stays one event. The memory is by kind, not by group or object:
// the informer is the kind's, every object of it waits alike, and ten
// groups of one such kind would otherwise wait ten bounds in one loop.
//
// Only Get is bounded: reading a template gets two objects and lists none.
// A templateReader lives as long as the engine of one cluster, whose loop
// alone uses it.
type templateReader struct {
	client.Reader
	timeout time.Duration
	clock   clock.PassiveClock
	// unanswered are the kinds whose last read did not answer within
	// timeout, with when to read them again.
	unanswered map[schema.GroupKind]time.Time
}

var _ client.Reader = &templateReader{}

func newTemplateReader(reader client.Reader, timeout time.Duration, clk clock.PassiveClock) *templateReader {
	if timeout <= 0 {
		timeout = DefaultTemplateReadTimeout
	}
	return &templateReader{Reader: reader, timeout: timeout, clock: clk, unanswered: map[schema.GroupKind]time.Time{}}
}

// Get reads obj within the bound. Templates and CustomResourceDefinitions
// are read as unstructured objects and metadata, which carry their kind.
// They are only read, so a cache's object is not copied: at a thousand
// groups, the copies were a fifth of each scale-up.
func (r *templateReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	opts = append(opts, client.UnsafeDisableDeepCopy)
	kind := obj.GetObjectKind().GroupVersionKind().GroupKind()
	if retryAt, ok := r.unanswered[kind]; ok && r.clock.Now().Before(retryAt) {
		return r.timedOut(kind)
	}
	readCtx, cancel := context.WithTimeoutCause(ctx, r.timeout, errTemplateReadTimedOut)
	defer cancel()
	err := r.Reader.Get(readCtx, key, obj, opts...)
	if err != nil && errors.Is(context.Cause(readCtx), errTemplateReadTimedOut) {
		r.unanswered[kind] = r.clock.Now().Add(unansweredKindRetry)
		ctrl.LoggerFrom(ctx).V(1).Info("Infrastructure template read timed out; not reading its kind again for a while",
			"kind", kind.String(), "timeout", r.timeout, "retryAfter", unansweredKindRetry, "err", err.Error())
		return r.timedOut(kind)
	}
	delete(r.unanswered, kind)
	return err
}

func (r *templateReader) timedOut(kind schema.GroupKind) error {
	return fmt.Errorf("timed out after %s waiting for the manager's cache of %s, which is read again every %s: "+
		"does the manager have RBAC to list and watch it?", r.timeout, kind, unansweredKindRetry)
}
