package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	capacitybufferv1beta1 "github.com/capi-autoscaler/capi-autoscaler/api/capacitybuffer/v1beta1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/buffers"
)

const (
	// bufferResolveInterval is how often a buffer's PodTemplate or
	// workload is read again while the buffer's spec does not change: a
	// workload's replicas move a percentage buffer, but not every loop.
	bufferResolveInterval = 30 * time.Second
	// quotaReadInterval is how often the ResourceQuotas of a namespace
	// with buffers are read again: their use moves with the namespace's
	// pods.
	quotaReadInterval = 10 * time.Second

	// notReadyReason is the reason upstream gives ReadyForProvisioning=False.
	notReadyReason = "error"

	// scheduleWindowCondition says where a scheduled buffer stands in its
	// schedule (buffers.ScheduleAnnotation): True while it holds its
	// room, False outside its windows, Unknown when its schedule is
	// ignored. Upstream has no schedule: the type is in our domain.
	scheduleWindowCondition = "autoscaling.cluster.x-k8s.io/ScheduleWindowOpen"
	windowOpenReason        = "WindowOpen"
	leadTimeReason          = "LeadTime"
	windowClosedReason      = "WindowClosed"
	invalidScheduleReason   = "InvalidSchedule"
)

// capacityBuffers are the CapacityBuffers of one workload cluster, resolved
// for its engine (buffers.Lister): a buffer with the active-capacity
// strategy becomes room for status.replicas pods of its PodTemplate or of
// its workload's pod template, and its status says so, as the upstream
// autoscaler's buffer controller writes it, with where a scheduled buffer
// stands in its schedule (its annotations, read in every list since they
// change no generation). Listing only reads; the
// statuses, and the PodTemplates of buffers with a scalableRef, are
// written when the engine's actuation asks (WriteStatus), never in DryRun
// mode.
type capacityBuffers struct {
	// optionalKind lists the CapacityBuffers; its live client also reads
	// PodTemplates and workloads, and writes PodTemplates and the buffers'
	// status.
	optionalKind

	// resolved are the last resolutions, by buffer UID.
	resolved map[types.UID]resolvedBuffer
	// unwritten are the buffers resolved anew by the last list, whose
	// PodTemplate WriteStatus writes.
	unwritten []unwrittenBuffer
	// listed are the buffers of the last list, whose status WriteStatus
	// writes where it changed: a window opens or closes without a new
	// resolution.
	listed []*capacitybufferv1beta1.CapacityBuffer
	// quotas are the ResourceQuotas of the namespaces with buffers, as
	// last read, by namespace.
	quotas map[string]namespaceQuotas
	// limits are what the quotas left the buffers of the last list, by
	// UID; a buffer whose namespace's quotas could not be read has none.
	limits map[types.UID]buffers.QuotaLimit
}

// namespaceQuotas are the ResourceQuotas of a namespace, and when they
// were read.
type namespaceQuotas struct {
	at    time.Time
	items []corev1.ResourceQuota
}

// unwrittenBuffer is a buffer as listed, and what it resolved to.
type unwrittenBuffer struct {
	buffer   *capacitybufferv1beta1.CapacityBuffer
	resolved resolvedBuffer
}

// newCapacityBuffers lists the CapacityBuffers of a workload cluster from
// its cache, and reads and writes the rest live.
func newCapacityBuffers(cached client.Reader, live func(context.Context) (client.Client, error), clock clock.PassiveClock) *capacityBuffers {
	return &capacityBuffers{optionalKind: optionalKind{kind: "CapacityBuffers", cached: cached, live: live, clock: clock}}
}

// resolvedBuffer is what a buffer of some generation resolved to, and when.
type resolvedBuffer struct {
	generation int64
	at         time.Time
	buffer     buffers.Buffer
	// template is the PodTemplate the buffer's pods are shaped like.
	template *corev1.PodTemplate
	// templateWritten is false when template, of a buffer with a
	// scalableRef, is still to be created or updated (WriteStatus).
	templateWritten bool
	// err is why the buffer could not be resolved.
	err error
}

// ListBuffers lists the buffers with the active-capacity strategy that
// hold room for at least one pod, resolved, within the ResourceQuotas of
// their namespaces. It writes nothing: what the buffers resolved to is
// written by WriteStatus.
func (c *capacityBuffers) ListBuffers(ctx context.Context) ([]buffers.Buffer, error) {
	list := &capacitybufferv1beta1.CapacityBufferList{}
	if listed, err := c.list(ctx, list); !listed {
		return nil, err
	}
	now := c.clock.Now()
	live, err := c.live(ctx)
	if err != nil {
		return nil, err
	}
	resolved := make(map[types.UID]resolvedBuffer, len(list.Items))
	c.unwritten, c.listed = nil, nil
	var out []buffers.Buffer
	for i := range list.Items {
		buffer := &list.Items[i]
		if ptr.Deref(buffer.Spec.ProvisioningStrategy, capacitybufferv1beta1.ActiveCapacityProvisioningStrategy) != capacitybufferv1beta1.ActiveCapacityProvisioningStrategy {
			continue
		}
		last, known := c.resolved[buffer.UID]
		if !known || last.generation != buffer.Generation || now.Sub(last.at) >= bufferResolveInterval {
			next := resolve(ctx, live, buffer)
			next.generation, next.at = buffer.Generation, now
			var failing *apiError
			if errors.As(next.err, &failing) && known && last.err == nil && last.generation == buffer.Generation {
				// The API server failed, not the buffer: its room is kept
				// as last resolved, and its status left as it is.
				klog.FromContext(ctx).Error(next.err, "Failed to resolve a capacity buffer; keeping room as last resolved", "CapacityBuffer", klog.KObj(buffer))
				last.at = now
			} else {
				last = next
				c.unwritten = append(c.unwritten, unwrittenBuffer{buffer: buffer, resolved: next})
			}
		}
		resolved[buffer.UID] = last
		c.listed = append(c.listed, buffer)
		if last.err == nil && last.buffer.Replicas > 0 {
			listed := last.buffer
			var err error
			if listed.Schedule, err = buffers.ScheduleOf(buffer.Annotations); err != nil {
				listed.ScheduleProblem = err.Error()
			}
			out = append(out, listed)
		}
	}
	c.resolved = resolved
	return c.limitByQuotas(ctx, live, now, out), nil
}

// limitByQuotas cuts the replicas of the buffers by the ResourceQuotas of
// their namespaces, as upstream does, and leaves out those left with
// none. Where the quotas cannot be read, the buffers keep their replicas.
func (c *capacityBuffers) limitByQuotas(ctx context.Context, live client.Client, now time.Time, listed []buffers.Buffer) []buffers.Buffer {
	byNamespace := map[string][]buffers.Buffer{}
	for _, b := range listed {
		byNamespace[b.Namespace] = append(byNamespace[b.Namespace], b)
	}
	read := make(map[string]namespaceQuotas, len(byNamespace))
	c.limits = make(map[types.UID]buffers.QuotaLimit, len(listed))
	for namespace, inNamespace := range byNamespace {
		quotas, ok := c.quotas[namespace]
		if !ok || now.Sub(quotas.at) >= quotaReadInterval {
			list := &corev1.ResourceQuotaList{}
			if err := live.List(ctx, list, client.InNamespace(namespace)); err != nil {
				klog.FromContext(ctx).Error(err, "Failed to read the ResourceQuotas of capacity buffers; their replicas are not limited by quotas", "namespace", namespace)
				continue
			}
			quotas = namespaceQuotas{at: now, items: list.Items}
		}
		read[namespace] = quotas
		limits := buffers.LimitByQuotas(inNamespace, quotas.items)
		for _, b := range inNamespace {
			c.limits[b.UID] = limits[b.Key()]
		}
	}
	c.quotas = read
	out := listed[:0]
	for _, b := range listed {
		if limit, ok := c.limits[b.UID]; ok {
			b.Replicas = limit.Allowed
		}
		if b.Replicas > 0 {
			out = append(out, b)
		}
	}
	return out
}

// WriteStatus writes the status of the buffers of the last ListBuffers
// where it changed: what they resolved to, with the PodTemplates of those
// resolved anew that have a scalableRef, and where the scheduled ones
// stand in their schedule (windows, by buffer key). A buffer whose
// PodTemplate could not be written is resolved again by the next list.
func (c *capacityBuffers) WriteStatus(ctx context.Context, windows map[string]buffers.Window) {
	unwritten, listed := c.unwritten, c.listed
	c.unwritten, c.listed = nil, nil
	if len(listed) == 0 {
		return
	}
	live, err := c.live(ctx)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Cannot write the status of the capacity buffers")
		return
	}
	for _, u := range unwritten {
		if u.resolved.template == nil || u.resolved.templateWritten {
			continue
		}
		template, err := writePodTemplate(ctx, live, u.resolved.template)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Failed to write the PodTemplate of a capacity buffer", "CapacityBuffer", klog.KObj(u.buffer))
			delete(c.resolved, u.buffer.UID)
			continue
		}
		resolved := c.resolved[u.buffer.UID]
		resolved.template, resolved.templateWritten = template, true
		c.resolved[u.buffer.UID] = resolved
	}
	for _, buffer := range listed {
		resolved, ok := c.resolved[buffer.UID]
		if !ok || (resolved.template != nil && !resolved.templateWritten) {
			continue
		}
		window, scheduled := windows[buffer.Namespace+"/"+buffer.Name]
		if !scheduled {
			window.Holding = true
		}
		limit, limited := c.limits[buffer.UID]
		if err := c.writeStatus(ctx, live, buffer, &resolved, window, quotaLimit{QuotaLimit: limit, known: limited}); err != nil {
			klog.FromContext(ctx).Error(err, "Failed to write the status of a capacity buffer", "CapacityBuffer", klog.KObj(buffer))
		}
	}
}

// apiError is a read or write of the workload cluster that failed for
// another reason than the object's absence: the API server's failure, not
// the buffer's.
type apiError struct{ err error }

func (e *apiError) Error() string { return e.err.Error() }
func (e *apiError) Unwrap() error { return e.err }

// readError wraps err as an apiError unless the object is missing, which
// is the buffer's error.
func readError(err error) error {
	if apierrors.IsNotFound(err) {
		return err
	}
	return &apiError{err: err}
}

// resolve reads what a buffer's pods are shaped like and counts them; it
// writes nothing.
func resolve(ctx context.Context, live client.Client, buffer *capacitybufferv1beta1.CapacityBuffer) resolvedBuffer {
	size := buffers.Size{Replicas: buffer.Spec.Replicas, Percentage: buffer.Spec.Percentage, Limits: buffer.Spec.Limits}
	var template *corev1.PodTemplate
	written := false
	switch {
	case buffer.Spec.PodTemplateRef != nil:
		template = &corev1.PodTemplate{}
		key := client.ObjectKey{Namespace: buffer.Namespace, Name: buffer.Spec.PodTemplateRef.Name}
		if err := live.Get(ctx, key, template); err != nil {
			return resolvedBuffer{err: fmt.Errorf("reading PodTemplate %s: %w", key.Name, readError(err))}
		}
		written = true
	case buffer.Spec.ScalableRef != nil:
		spec, replicas, err := workloadTemplate(ctx, live, buffer.Namespace, buffer.Spec.ScalableRef)
		if err != nil {
			return resolvedBuffer{err: err}
		}
		size.WorkloadReplicas = &replicas
		if template, written, err = bufferPodTemplate(ctx, live, buffer, spec); err != nil {
			return resolvedBuffer{err: err}
		}
	default:
		return resolvedBuffer{err: errors.New("the buffer names neither a podTemplateRef nor a scalableRef")}
	}
	replicas, err := size.ReplicasOf(&template.Template)
	if err != nil {
		return resolvedBuffer{template: template, templateWritten: written, err: err}
	}
	return resolvedBuffer{template: template, templateWritten: written, buffer: buffers.Buffer{
		Namespace: buffer.Namespace, Name: buffer.Name, UID: buffer.UID, CreationTimestamp: buffer.CreationTimestamp,
		Template: template.Template, Replicas: replicas,
	}}
}

// workloadTemplate reads the pod template and the replicas of the workload
// a buffer's scalableRef names: a Deployment, ReplicaSet, StatefulSet,
// ReplicationController, or Job (its parallelism).
func workloadTemplate(ctx context.Context, live client.Client, namespace string, ref *capacitybufferv1beta1.ScalableRef) (*corev1.PodTemplateSpec, int32, error) {
	key := client.ObjectKey{Namespace: namespace, Name: ref.Name}
	var (
		workload client.Object
		read     func() (*corev1.PodTemplateSpec, *int32)
	)
	switch ref.APIGroup + "/" + ref.Kind {
	case "apps/Deployment":
		d := &appsv1.Deployment{}
		workload, read = d, func() (*corev1.PodTemplateSpec, *int32) { return &d.Spec.Template, d.Spec.Replicas }
	case "apps/ReplicaSet":
		rs := &appsv1.ReplicaSet{}
		workload, read = rs, func() (*corev1.PodTemplateSpec, *int32) { return &rs.Spec.Template, rs.Spec.Replicas }
	case "apps/StatefulSet":
		ss := &appsv1.StatefulSet{}
		workload, read = ss, func() (*corev1.PodTemplateSpec, *int32) { return &ss.Spec.Template, ss.Spec.Replicas }
	case "/ReplicationController":
		rc := &corev1.ReplicationController{}
		workload, read = rc, func() (*corev1.PodTemplateSpec, *int32) { return rc.Spec.Template, rc.Spec.Replicas }
	case "batch/Job":
		job := &batchv1.Job{}
		workload, read = job, func() (*corev1.PodTemplateSpec, *int32) { return &job.Spec.Template, job.Spec.Parallelism }
	default:
		return nil, 0, fmt.Errorf("scalableRef kind %s in group %q is not supported: name a Deployment, ReplicaSet, StatefulSet, ReplicationController or Job, or use a podTemplateRef", ref.Kind, ref.APIGroup)
	}
	if err := live.Get(ctx, key, workload); err != nil {
		return nil, 0, fmt.Errorf("reading %s %s: %w", ref.Kind, ref.Name, readError(err))
	}
	template, replicas := read()
	if template == nil {
		return nil, 0, fmt.Errorf("%s %s has no pod template", ref.Kind, ref.Name)
	}
	// Unset, the API server's default is one.
	return template, ptr.Deref(replicas, 1), nil
}

// bufferPodTemplateName is the PodTemplate that shows the pods of a buffer
// with a scalableRef, as upstream names it.
func bufferPodTemplateName(buffer *capacitybufferv1beta1.CapacityBuffer) string {
	return fmt.Sprintf("capacitybuffer-%s-pod-template", buffer.Name)
}

// bufferPodTemplate is the PodTemplate of a buffer with a scalableRef:
// the workload's pod template, owned by the buffer, so that its status
// names a template as for a podTemplateRef. It tells whether the
// PodTemplate is written as it should be; when not, it returns it as
// writePodTemplate is to write it.
func bufferPodTemplate(ctx context.Context, live client.Client, buffer *capacitybufferv1beta1.CapacityBuffer, spec *corev1.PodTemplateSpec) (*corev1.PodTemplate, bool, error) {
	key := client.ObjectKey{Namespace: buffer.Namespace, Name: bufferPodTemplateName(buffer)}
	want := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: spec.Labels, Annotations: spec.Annotations}, Spec: spec.Spec}
	template := &corev1.PodTemplate{}
	err := live.Get(ctx, key, template)
	switch {
	case apierrors.IsNotFound(err):
		return &corev1.PodTemplate{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: capacitybufferv1beta1.GroupVersion.String(), Kind: "CapacityBuffer",
				Name: buffer.Name, UID: buffer.UID, Controller: ptr.To(true),
			}}},
			Template: want,
		}, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("reading PodTemplate %s: %w", key.Name, &apiError{err: err})
	}
	if !metav1.IsControlledBy(template, buffer) {
		return nil, false, fmt.Errorf("PodTemplate %s exists and is not the buffer's", key.Name)
	}
	if equality.Semantic.DeepEqual(template.Template, want) {
		return template, true, nil
	}
	template = template.DeepCopy()
	template.Template = want
	return template, false, nil
}

// writePodTemplate creates a buffer's PodTemplate, or updates the one
// read (bufferPodTemplate), and returns it as written.
func writePodTemplate(ctx context.Context, live client.Client, template *corev1.PodTemplate) (*corev1.PodTemplate, error) {
	template = template.DeepCopy()
	if template.ResourceVersion == "" {
		if err := live.Create(ctx, template); err != nil {
			return nil, fmt.Errorf("creating PodTemplate %s: %w", template.Name, err)
		}
		return template, nil
	}
	if err := live.Update(ctx, template); err != nil {
		return nil, fmt.Errorf("updating PodTemplate %s: %w", template.Name, err)
	}
	return template, nil
}

// quotaLimit is what the ResourceQuotas left a buffer, if known: not for a
// buffer not ready, or whose namespace's quotas could not be read.
type quotaLimit struct {
	buffers.QuotaLimit
	known bool
}

// writeStatus writes what a buffer resolved to, as the upstream autoscaler
// does, when it changed: the PodTemplate, the replicas as the quotas
// limit them, and the ReadyForProvisioning, Provisioning and
// LimitedByQuotas conditions; with where a scheduled buffer stands in
// window (Holding for a buffer without a schedule), or why its schedule
// is ignored.
func (c *capacityBuffers) writeStatus(ctx context.Context, live client.Client, buffer *capacitybufferv1beta1.CapacityBuffer, resolved *resolvedBuffer, window buffers.Window, quota quotaLimit) error {
	updated := buffer.DeepCopy()
	status := &updated.Status
	status.ProvisioningStrategy = ptr.To(capacitybufferv1beta1.ActiveCapacityProvisioningStrategy)
	// As upstream, a buffer not ready holds no replicas, and names the
	// PodTemplate only when it exists.
	status.PodTemplateRef, status.PodTemplateGeneration, status.Replicas = nil, nil, nil
	if resolved.template != nil {
		status.PodTemplateRef = &capacitybufferv1beta1.LocalObjectRef{Name: resolved.template.Name}
		status.PodTemplateGeneration = ptr.To(resolved.template.Generation)
	}
	now := metav1.NewTime(c.clock.Now())
	ready := metav1.Condition{Type: capacitybufferv1beta1.ReadyForProvisioningCondition, ObservedGeneration: buffer.Generation, LastTransitionTime: now}
	provisioning := metav1.Condition{Type: capacitybufferv1beta1.ProvisioningCondition, ObservedGeneration: buffer.Generation, LastTransitionTime: now}
	replicas := resolved.buffer.Replicas
	if quota.known && resolved.err == nil {
		replicas = quota.Allowed
		limitedByQuotas := metav1.Condition{Type: capacitybufferv1beta1.LimitedByQuotasCondition, Status: metav1.ConditionFalse,
			Reason: capacitybufferv1beta1.ResourceQuotasAllocatedReason, ObservedGeneration: buffer.Generation, LastTransitionTime: now}
		if quota.Limited() {
			limitedByQuotas.Status, limitedByQuotas.Message = metav1.ConditionTrue, quota.Message()
		}
		if quota.Counted {
			meta.SetStatusCondition(&status.Conditions, limitedByQuotas)
		}
	}
	switch {
	case resolved.err != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, notReadyReason, resolved.err.Error()
		provisioning.Status, provisioning.Reason = metav1.ConditionFalse, capacitybufferv1beta1.NotReadyForProvisioningReason
		provisioning.Message = "No room is kept until the buffer is ready for provisioning"
	case !window.Holding:
		status.Replicas = ptr.To(replicas)
		ready.Status, ready.Reason, ready.Message = metav1.ConditionTrue, capacitybufferv1beta1.AttributesSetSuccessfullyReason, "ready"
		provisioning.Status, provisioning.Reason = metav1.ConditionFalse, windowClosedReason
		provisioning.Message = "No room is kept outside the buffer's schedule windows"
	case replicas == 0:
		status.Replicas = ptr.To[int32](0)
		ready.Status, ready.Reason, ready.Message = metav1.ConditionTrue, capacitybufferv1beta1.AttributesSetSuccessfullyReason, "ready"
		provisioning.Status, provisioning.Reason, provisioning.Message = metav1.ConditionFalse, capacitybufferv1beta1.BufferIsEmptyReason, "The buffer holds room for no pod"
		if resolved.buffer.Replicas > 0 {
			provisioning.Message = "The buffer holds room for no pod: its namespace's ResourceQuotas leave none"
		}
	default:
		status.Replicas = ptr.To(replicas)
		ready.Status, ready.Reason, ready.Message = metav1.ConditionTrue, capacitybufferv1beta1.AttributesSetSuccessfullyReason, "ready"
		provisioning.Status, provisioning.Reason = metav1.ConditionTrue, capacitybufferv1beta1.FakePodsInjectedReason
		provisioning.Message = fmt.Sprintf("The autoscaler keeps room for %d pod(s) of PodTemplate %s", replicas, resolved.template.Name)
	}
	meta.SetStatusCondition(&status.Conditions, ready)
	meta.SetStatusCondition(&status.Conditions, provisioning)
	if scheduled := scheduleCondition(buffer, resolved, window); scheduled != nil {
		scheduled.ObservedGeneration, scheduled.LastTransitionTime = buffer.Generation, now
		meta.SetStatusCondition(&status.Conditions, *scheduled)
	} else {
		meta.RemoveStatusCondition(&status.Conditions, scheduleWindowCondition)
	}
	if equality.Semantic.DeepEqual(buffer.Status, updated.Status) {
		return nil
	}
	return live.Status().Patch(ctx, updated, client.MergeFromWithOptions(buffer, client.MergeFromWithOptimisticLock{}))
}

// scheduleCondition is the scheduleWindowCondition of a buffer: nil for a
// buffer without a schedule, or not resolved (the engine saw no window).
func scheduleCondition(buffer *capacitybufferv1beta1.CapacityBuffer, resolved *resolvedBuffer, window buffers.Window) *metav1.Condition {
	schedule, err := buffers.ScheduleOf(buffer.Annotations)
	switch {
	case err != nil:
		return &metav1.Condition{Type: scheduleWindowCondition, Status: metav1.ConditionUnknown, Reason: invalidScheduleReason,
			Message: "The schedule is ignored, and the buffer holds its room at all times as without one: " + err.Error()}
	case schedule == nil || resolved.err != nil || resolved.buffer.Replicas == 0:
		return nil
	case window.Open != nil:
		return &metav1.Condition{Type: scheduleWindowCondition, Status: metav1.ConditionTrue, Reason: windowOpenReason, Message: "The buffer: " + window.Message()}
	case window.Holding:
		return &metav1.Condition{Type: scheduleWindowCondition, Status: metav1.ConditionTrue, Reason: leadTimeReason, Message: "The buffer: " + window.Message()}
	default:
		return &metav1.Condition{Type: scheduleWindowCondition, Status: metav1.ConditionFalse, Reason: windowClosedReason, Message: "The buffer: " + window.Message()}
	}
}
