package clusterapi

import (
	"context"
	"reflect"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// cacheReader serves objects as controller-runtime's cache does: Get and
// List copy them out (DeepCopyObject) unless UnsafeDisableDeepCopy, List
// filters by namespace and label selector, and kinds it holds nothing of
// list empty. Typed objects, unstructured objects and metadata are kept
// as they were added.
type cacheReader struct {
	scheme  *runtime.Scheme
	objects map[schema.GroupKind][]client.Object
	byKey   map[schema.GroupKind]map[client.ObjectKey]client.Object
	// gets and lists count the reads by kind.
	gets, lists map[schema.GroupKind]int
}

var _ client.Reader = &cacheReader{}

func newCacheReader(scheme *runtime.Scheme, objects ...client.Object) *cacheReader {
	r := &cacheReader{scheme: scheme, objects: map[schema.GroupKind][]client.Object{}, byKey: map[schema.GroupKind]map[client.ObjectKey]client.Object{},
		gets: map[schema.GroupKind]int{}, lists: map[schema.GroupKind]int{}}
	for _, obj := range objects {
		kind := r.kindOf(obj)
		r.objects[kind] = append(r.objects[kind], obj)
		if r.byKey[kind] == nil {
			r.byKey[kind] = map[client.ObjectKey]client.Object{}
		}
		r.byKey[kind][client.ObjectKeyFromObject(obj)] = obj
	}
	return r
}

func (r *cacheReader) kindOf(obj runtime.Object) schema.GroupKind {
	if gvk := obj.GetObjectKind().GroupVersionKind(); !gvk.Empty() {
		return gvk.GroupKind()
	}
	gvk, err := apiutil.GVKForObject(obj, r.scheme)
	if err != nil {
		panic(err)
	}
	return gvk.GroupKind()
}

func (r *cacheReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	getOpts := (&client.GetOptions{}).ApplyOptions(opts)
	kind := r.kindOf(obj)
	r.gets[kind]++
	stored, ok := r.byKey[kind][key]
	if !ok {
		return apierrors.NewNotFound(schema.GroupResource{Group: kind.Group, Resource: kind.Kind}, key.Name)
	}
	var found runtime.Object = stored
	if getOpts.UnsafeDisableDeepCopy == nil || !*getOpts.UnsafeDisableDeepCopy {
		found = stored.DeepCopyObject()
	}
	reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(found).Elem())
	return nil
}

func (r *cacheReader) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	listOpts := (&client.ListOptions{}).ApplyOptions(opts)
	listKind := r.kindOf(list)
	kind := schema.GroupKind{Group: listKind.Group, Kind: strings.TrimSuffix(listKind.Kind, "List")}
	r.lists[kind]++
	var items []runtime.Object
	for _, stored := range r.objects[kind] {
		if listOpts.Namespace != "" && stored.GetNamespace() != listOpts.Namespace {
			continue
		}
		if listOpts.LabelSelector != nil && !listOpts.LabelSelector.Matches(labels.Set(stored.GetLabels())) {
			continue
		}
		if listOpts.UnsafeDisableDeepCopy != nil && *listOpts.UnsafeDisableDeepCopy {
			items = append(items, stored)
		} else {
			items = append(items, stored.DeepCopyObject())
		}
	}
	return meta.SetList(list, items)
}

// cachedClient reads from a cache and writes through Client: nil for an
// engine that writes nothing (DryRun).
type cachedClient struct {
	client.Client
	cache client.Reader
}

func (c *cachedClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return c.cache.Get(ctx, key, obj, opts...)
}

func (c *cachedClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return c.cache.List(ctx, list, opts...)
}
