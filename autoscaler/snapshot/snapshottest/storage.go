package snapshottest

import (
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// WithClaims gives the pod a volume for each claim.
func WithClaims(claims ...string) PodOption {
	return func(pod *corev1.Pod) {
		for _, claim := range claims {
			pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: claim, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
			}})
		}
	}
}

// WithEphemeralVolume gives the pod a generic ephemeral volume, whose
// claim is named after the pod and the volume.
func WithEphemeralVolume(name string) PodOption {
	return func(pod *corev1.Pod) {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			Ephemeral: &corev1.EphemeralVolumeSource{},
		}})
	}
}

// StorageClass returns a class; zones, when given, are its allowed
// topologies.
func StorageClass(name, provisioner string, mode storagev1.VolumeBindingMode, zones ...string) *storagev1.StorageClass {
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: provisioner, VolumeBindingMode: &mode}
	if len(zones) > 0 {
		class.AllowedTopologies = []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{{Key: corev1.LabelTopologyZone, Values: zones}}}}
	}
	return class
}

// UnboundClaim is a claim of class that no volume is bound to yet.
func UnboundClaim(name, class string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(class),
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending},
	}
}

// BoundClaim is a claim bound to volume as the PV controller leaves it.
func BoundClaim(name, volume string) *corev1.PersistentVolumeClaim {
	claim := UnboundClaim(name, "")
	claim.Spec.VolumeName = volume
	claim.Annotations = map[string]string{"pv.kubernetes.io/bind-completed": "yes"}
	claim.Status.Phase = corev1.ClaimBound
	return claim
}

// VolumeOption changes a persistent volume built by PersistentVolume.
type VolumeOption func(*corev1.PersistentVolume)

// PersistentVolume returns an available 10Gi ReadWriteOnce volume.
func PersistentVolume(name string, opts ...VolumeOption) *corev1.PersistentVolume {
	volume := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeAvailable},
	}
	for _, opt := range opts {
		opt(volume)
	}
	return volume
}

// BoundTo binds the volume to a claim.
func BoundTo(claim string) VolumeOption {
	return func(volume *corev1.PersistentVolume) {
		volume.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "default", Name: claim}
		volume.Status.Phase = corev1.VolumeBound
	}
}

// RequiringNode makes the volume reachable only from nodes with the label.
func RequiringNode(key, value string) VolumeOption {
	return func(volume *corev1.PersistentVolume) {
		volume.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpIn, Values: []string{value}}},
		}}}}
	}
}

// WithVolumeLabels sets the volume's labels.
func WithVolumeLabels(kv ...string) VolumeOption {
	return func(volume *corev1.PersistentVolume) {
		volume.Labels = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			volume.Labels[kv[i]] = kv[i+1]
		}
	}
}

// OfClass sets the volume's storage class.
func OfClass(class string) VolumeOption {
	return func(volume *corev1.PersistentVolume) { volume.Spec.StorageClassName = class }
}

// CSIVolume makes the volume one of a CSI driver, with a handle of its
// own.
func CSIVolume(driver string) VolumeOption {
	return func(volume *corev1.PersistentVolume) {
		volume.Spec.CSI = &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: "handle-" + volume.Name}
	}
}

// CSINode reports an attach limit of driver for node.
func CSINode(node, driver string, limit int32) *storagev1.CSINode {
	return &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{
			Name: driver, NodeID: node, Allocatable: &storagev1.VolumeNodeResources{Count: ptr.To(limit)},
		}}},
	}
}
