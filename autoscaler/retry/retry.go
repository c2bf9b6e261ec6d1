// Package retry retries API calls as k8s.io/client-go/util/retry does, but
// always returns the error of the last try. client-go's OnError returns
// nil when that error is a context's (canceled, or its deadline exceeded)
// and no earlier try failed in a retriable way: its caller then takes a
// call cut by a loop's timeout or an engine's stop for one that succeeded,
// and reads the object it did not get.
package retry

import (
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
)

// OnError calls fn until it succeeds, fails in a way retriable does not
// accept, or backoff has no step left, and returns its last error.
func OnError(backoff wait.Backoff, retriable func(error) bool, fn func() error) error {
	for {
		err := fn()
		if err == nil || !retriable(err) || backoff.Steps <= 1 {
			return err
		}
		time.Sleep(backoff.Step())
	}
}

// OnConflict calls fn again while it fails with a conflict, as
// retry.RetryOnConflict with retry.DefaultRetry does, and returns its last
// error.
func OnConflict(fn func() error) error {
	return OnError(retry.DefaultRetry, apierrors.IsConflict, fn)
}
