package manager

import (
	"errors"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
)

func TestNewManagerLogsTheFailedAttemptsWithTheLoggerOfItsContext(t *testing.T) {
	g := NewWithT(t)
	backoff := managerStartBackoff
	t.Cleanup(func() { managerStartBackoff = backoff })
	managerStartBackoff = wait.Backoff{Duration: time.Millisecond, Steps: 3}

	var logged []string
	logger := funcr.New(func(prefix, args string) { logged = append(logged, args) }, funcr.Options{})
	ctx := klog.NewContext(t.Context(), logger)
	attempts := 0
	_, err := newManager(ctx, &rest.Config{}, ctrl.Options{}, func(*rest.Config, ctrl.Options) (ctrl.Manager, error) {
		attempts++
		if attempts == 1 {
			return nil, errors.New("the API server is upgrading")
		}
		return nil, nil
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(attempts).To(Equal(2))
	g.Expect(logged).To(ConsistOf(And(
		ContainSubstring("Creating the manager failed, trying again"),
		ContainSubstring("the API server is upgrading"),
	)))
}
