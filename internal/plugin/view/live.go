package view

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/cli"
)

const (
	// minRefreshInterval is the least time between two reads of the view:
	// a manager that loops every second changes something every second.
	minRefreshInterval = time.Second
	// resyncInterval refreshes the view when no watched object changes,
	// for the events (which are not watched) and through failed watches.
	resyncInterval = 15 * time.Second
	// rewatchDelay is how long a failed or closed watch waits to start anew.
	rewatchDelay = 2 * time.Second
)

// watchViews calls show with the view of the ClusterAutoscalers in scope
// whenever they or their explanation ConfigMaps change, at most every
// minRefreshInterval, until ctx ends.
func watchViews(ctx context.Context, c client.WithWatch, scope cli.Scope, show func(*StatusView, error)) {
	changed := make(chan struct{}, 1)
	notify := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	go watchObjects(ctx, notify, func(ctx context.Context) (watch.Interface, error) {
		return c.Watch(ctx, &autoscalingv1alpha1.ClusterAutoscalerList{}, client.InNamespace(scope.Namespace))
	})
	// The explanation ConfigMaps by their label: watching every ConfigMap
	// would read all their data.
	go watchObjects(ctx, notify, func(ctx context.Context) (watch.Interface, error) {
		return c.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace(scope.Namespace), client.HasLabels{autoscalingv1alpha1.ExplanationLabel})
	})
	resync := time.NewTicker(resyncInterval)
	defer resync.Stop()
	for {
		read := time.Now()
		view, err := Observe(ctx, c, scope)
		if ctx.Err() != nil {
			return
		}
		show(view, err)
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-resync.C:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(read.Add(minRefreshInterval))):
		}
	}
}

// watchObjects calls notify for every change a watch reports, and starts
// the watch anew whenever it fails or the API server ends it, until ctx
// ends.
func watchObjects(ctx context.Context, notify func(), start func(context.Context) (watch.Interface, error)) {
	for {
		if w, err := start(ctx); err == nil {
			for event := range w.ResultChan() {
				if event.Type == watch.Error {
					break
				}
				notify()
			}
			w.Stop()
			// What changed while no watch ran shows in the next read.
			notify()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(rewatchDelay):
		}
	}
}
