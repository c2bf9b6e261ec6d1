package retry

import (
	"context"
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/retry"
)

func TestOnConflictReturnsTheLastError(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, "node-1", errors.New("changed"))
	for _, tc := range []struct {
		name  string
		tries []error
		want  error
		calls int
	}{
		{name: "success", tries: []error{nil}, calls: 1},
		{name: "a conflict, then success", tries: []error{conflict, nil}, calls: 2},
		{name: "the context's deadline", tries: []error{fmt.Errorf("reading node-1: %w", context.DeadlineExceeded)}, want: context.DeadlineExceeded, calls: 1},
		{name: "a conflict, then the context cancelled", tries: []error{conflict, context.Canceled}, want: context.Canceled, calls: 2},
		{name: "conflicts until the steps run out", tries: []error{conflict, conflict, conflict, conflict, conflict, conflict}, want: conflict, calls: retry.DefaultRetry.Steps},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := OnConflict(func() error {
				calls++
				return tc.tries[calls-1]
			})
			if calls != tc.calls {
				t.Errorf("fn called %d times, want %d", calls, tc.calls)
			}
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("OnConflict = %v, want %v", err, tc.want)
			}
		})
	}
}
