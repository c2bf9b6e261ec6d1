// Package provisioning answers ProvisioningRequests of the check-capacity
// class (autoscaling.x-k8s.io/v1): does the cluster, as it is, have room
// for all the pods a request asks for? A request whose pods all fit gets
// that room booked: the engine keeps it, as it keeps the room of pending
// pods, until the booking ends or the request's pods take it.
package provisioning

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	provisioningv1 "github.com/capi-autoscaler/capi-autoscaler/api/provisioningrequest/v1"
)

// ConsumeAnnotations name, on a pod, the request in its namespace whose
// capacity the pod takes: the current key and the one upstream still
// honours.
var ConsumeAnnotations = []string{
	provisioningv1.ConsumeProvisioningRequestAnnotation,
	provisioningv1.DeprecatedConsumeProvisioningRequestAnnotation,
}

// requestAnnotation, on a virtual pod, names the request it stands for.
const requestAnnotation = "autoscaling.cluster.x-k8s.io/provisioning-request"

// Request is a check-capacity ProvisioningRequest, resolved.
type Request struct {
	Namespace string
	Name      string
	UID       types.UID
	PodSets   []PodSet
	// Booked is set once capacity was found: its room is kept for the pods
	// still to come.
	Booked bool
}

// PodSet is Count pods of Template.
type PodSet struct {
	Template corev1.PodTemplateSpec
	Count    int32
}

// Key is the request's namespace/name.
func (r *Request) Key() string { return r.Namespace + "/" + r.Name }

// Size is the number of pods the request asks for.
func (r *Request) Size() int {
	size := 0
	for _, set := range r.PodSets {
		size += int(set.Count)
	}
	return size
}

// Pods are the virtual pods of the request, less the first consumed ones:
// the pods that took their room already.
func (r *Request) Pods(consumed int) []*corev1.Pod {
	var pods []*corev1.Pod
	for i, set := range r.PodSets {
		for n := range set.Count {
			if consumed > 0 {
				consumed--
				continue
			}
			pods = append(pods, r.pod(i, n, &set.Template))
		}
	}
	return pods
}

func (r *Request) pod(set int, n int32, template *corev1.PodTemplateSpec) *corev1.Pod {
	annotations := maps.Clone(template.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[requestAnnotation] = r.Key()
	spec := template.Spec.DeepCopy()
	spec.NodeName = ""
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: r.Namespace, Name: fmt.Sprintf("%s-%d-%d", r.Name, set, n),
			UID:    types.UID(fmt.Sprintf("%s-%d-%d", r.UID, set, n)),
			Labels: template.Labels, Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: provisioningv1.GroupVersion.String(), Kind: "ProvisioningRequest",
				Name: r.Name, UID: r.UID, Controller: ptr.To(true),
			}},
		},
		Spec:   *spec,
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

// ConsumerOf is the key of the request a pod consumes, or "".
func ConsumerOf(namespace string, annotations map[string]string) string {
	for _, key := range ConsumeAnnotations {
		if name := annotations[key]; name != "" {
			return namespace + "/" + name
		}
	}
	return ""
}

// Answer says whether the pods of a request not booked yet fit.
type Answer struct {
	Namespace string
	Name      string
	UID       types.UID
	Found     bool
	// Message says how many pods fit nowhere, when not found.
	Message string
}

// Checker lists the check-capacity requests of a cluster that are waiting
// for an answer or booked, and records the answers.
type Checker interface {
	ListRequests(ctx context.Context) ([]Request, error)
	Answer(ctx context.Context, answers []Answer)
}
