package scalable

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	clientgoretry "k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/retry"
)

// retryingReader retries the reads that fail for a moment (throttling, a
// timeout, an API server restarting). A scale-down re-reads its group
// before every step: without retries, one failed read in a handful gives
// the step up, and a flaky API server would stop every scale-down.
type retryingReader struct {
	client.Reader
}

func isTransient(err error) bool {
	return apierrors.IsTooManyRequests(err) || apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) ||
		apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsUnexpectedServerError(err)
}

func (r retryingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return retry.OnError(clientgoretry.DefaultBackoff, isTransient, func() error { return r.Reader.Get(ctx, key, obj, opts...) })
}

func (r retryingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return retry.OnError(clientgoretry.DefaultBackoff, isTransient, func() error { return r.Reader.List(ctx, list, opts...) })
}
