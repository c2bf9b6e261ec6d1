package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
)

// The informers of the workload clusters run their transforms and event
// handlers in client-go's goroutines, outside any engine's loop, where a
// panic ends the process (utilruntime.HandleCrash), and with it the
// autoscaling of every cluster. What is here keeps such a panic in its
// cluster, as Engine.Run does for the loop.

// recoverTransform returns transform, made to log a panic with its stack
// and to return the object as read instead. The cache then holds it
// untrimmed (a Node, the metadata of a controller, managed fields), which
// the engine reads the same, or unconverted (a Pod), which the engine's
// reads refuse, naming it (workloadReader.ListPods): the transforms are
// shared by the caches of every cluster and do not know which one the
// object is of, the engine that reads it does.
func recoverTransform(transform toolscache.TransformFunc) toolscache.TransformFunc {
	return func(obj any) (out any, err error) {
		defer func() {
			if r := recover(); r != nil {
				logger := klog.Background().WithValues("objectType", fmt.Sprintf("%T", obj))
				if object, err := meta.Accessor(obj); err == nil {
					logger = logger.WithValues("object", klog.KObj(object))
				}
				logPanic(klog.NewContext(context.Background(), logger), r)
				out, err = obj, nil
			}
		}()
		return transform(obj)
	}
}

// logPanic logs a recovered panic with its stack, as Kubernetes
// components log the panics they recover ("Observed a panic").
func logPanic(ctx context.Context, value any) {
	for _, handle := range utilruntime.PanicHandlers {
		handle(ctx, value)
	}
}

// recoveringHandler is an event handler of a workload cluster's informer
// whose panics are handed to onPanic rather than end the process.
type recoveringHandler struct {
	handler toolscache.ResourceEventHandler
	onPanic func(value any)
}

func (h recoveringHandler) OnAdd(obj any, isInInitialList bool) {
	defer h.recoverPanic()
	h.handler.OnAdd(obj, isInInitialList)
}

func (h recoveringHandler) OnUpdate(oldObj, newObj any) {
	defer h.recoverPanic()
	h.handler.OnUpdate(oldObj, newObj)
}

func (h recoveringHandler) OnDelete(obj any) {
	defer h.recoverPanic()
	h.handler.OnDelete(obj)
}

func (h recoveringHandler) recoverPanic() {
	if r := recover(); r != nil {
		h.onPanic(r)
	}
}

// watchPods adds handler, under name, to the pod informer of every
// connection to the workload cluster; a panic of the handler is the
// cluster's (handlerPanicked).
func (r *ClusterAutoscalerReconciler) watchPods(ctx context.Context, cluster client.ObjectKey, name string, handler toolscache.ResourceEventHandler) error {
	recovering := recoveringHandler{handler: handler, onPanic: func(value any) { r.handlerPanicked(cluster, value) }}
	return r.ClusterCache.Watch(ctx, cluster, podInformerWatcher{name: name, watch: func(informer cache.Informer) error {
		_, err := informer.AddEventHandler(recovering)
		return err
	}})
}

// handlerPanicked logs and counts a panic of an event handler of a
// workload cluster's informers, and reports it in a Warning event on the
// cluster's ClusterAutoscalers. The engines go on: the handlers only ask
// them for early loops.
func (r *ClusterAutoscalerReconciler) handlerPanicked(cluster client.ObjectKey, value any) {
	ctx := ctrl.LoggerInto(r.ctx, ctrl.LoggerFrom(r.ctx).WithValues("Cluster", klog.KRef(cluster.Namespace, cluster.Name)))
	logPanic(ctx, value)
	r.Metrics.RecordInformerPanic(cluster.String())
	cas, err := r.listClusterAutoscalers(ctx, cluster)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the ClusterAutoscalers of a Cluster, to report a panic")
		return
	}
	for i := range cas {
		r.Recorder.Eventf(&cas[i], corev1.EventTypeWarning, autoscalingv1alpha1.InformerPanickedReason,
			"An event handler of the informers of workload cluster %s panicked: %v; the panic was recovered and the engine goes on, with loops every scan interval", cluster, value)
	}
}
