package clustergen

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The storage classes: dynamically provisioned CSI volumes bound at once
// or when a pod needs them (anywhere, or in two zones only), and local
// volumes that only static persistent volumes serve.
const (
	ClassImmediate = "csi-immediate"
	ClassWFFC      = "csi-wffc"
	ClassZonal     = "csi-zonal"
	ClassLocal     = "local"

	// BindCompletedAnnotation marks a claim the PV controller bound; only
	// then does kube-scheduler take it as bound.
	BindCompletedAnnotation = "pv.kubernetes.io/bind-completed"
)

// storageState is what volumes refer to: claims by namespace, for pods to
// share.
type storageState struct {
	boundClaims map[string][]string
	volumes     int
}

func (g *generator) storageObjects() {
	g.storage = &storageState{boundClaims: map[string][]string{}}
	wffc := ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)
	g.c.StorageClasses = []*storagev1.StorageClass{
		{ObjectMeta: metav1.ObjectMeta{Name: ClassImmediate}, Provisioner: CSIDriver, VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate)},
		{ObjectMeta: metav1.ObjectMeta{Name: ClassWFFC}, Provisioner: CSIDriver, VolumeBindingMode: wffc},
		{
			ObjectMeta: metav1.ObjectMeta{Name: ClassZonal}, Provisioner: CSIDriver, VolumeBindingMode: wffc,
			AllowedTopologies: []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{{
				Key: corev1.LabelTopologyZone, Values: zones[:2],
			}}}},
		},
		{ObjectMeta: metav1.ObjectMeta{Name: ClassLocal}, Provisioner: "kubernetes.io/no-provisioner", VolumeBindingMode: wffc},
	}
	// Static local volumes on some nodes, or in a zone, waiting for claims.
	for _, node := range g.c.Nodes {
		if g.chance(0.3) {
			g.c.PersistentVolumes = append(g.c.PersistentVolumes, g.localVolume(corev1.LabelHostname, node.Name))
		}
	}
	for _, zone := range zones {
		g.c.PersistentVolumes = append(g.c.PersistentVolumes, g.localVolume(corev1.LabelTopologyZone, zone))
	}
}

// localVolume is an available static volume of the local class, on the
// nodes whose label key has value.
func (g *generator) localVolume(key, value string) *corev1.PersistentVolume {
	g.storage.volumes++
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("local-%04d", g.storage.volumes)},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(pick(g, []string{"10Gi", "100Gi"}))},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              ClassLocal,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/disks/" + value}},
			NodeAffinity:                  volumeNodeAffinity(key, value),
		},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeAvailable},
	}
}

func volumeNodeAffinity(key, value string) *corev1.VolumeNodeAffinity {
	return &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpIn, Values: []string{value}}},
	}}}}
}

// attachTo gives a bound pod a CSI volume bound in its node's zone, which
// counts against the node's attach limit.
func (s *storageState) attachTo(g *generator, pod *corev1.Pod, node *corev1.Node) {
	name := s.boundClaim(g, pod.Namespace, node.Labels[corev1.LabelTopologyZone])
	addClaimVolume(pod, name)
}

// volumesOf gives a pending pod one or two volumes: bound claims, claims
// of WaitForFirstConsumer classes, claims of the Immediate class not bound
// yet, claims that do not exist, or claims of bound pods.
func (s *storageState) volumesOf(g *generator, pod *corev1.Pod) {
	for range g.between(1, 2) {
		var name string
		switch n := g.rnd.IntN(100); {
		case n < 30:
			name = s.boundClaim(g, pod.Namespace, pick(g, append([]string{""}, zones...)))
		case n < 55:
			name = s.claim(g, pod.Namespace, pick(g, []string{ClassWFFC, ClassZonal}), "10Gi")
		case n < 72:
			name = s.claim(g, pod.Namespace, ClassLocal, pick(g, []string{"5Gi", "50Gi"}))
		case n < 82:
			name = s.claim(g, pod.Namespace, ClassImmediate, "10Gi")
		case n < 88:
			name = fmt.Sprintf("missing-%d", g.rnd.IntN(1000))
		default:
			if claims := s.boundClaims[pod.Namespace]; len(claims) > 0 {
				name = pick(g, claims)
			} else {
				name = s.boundClaim(g, pod.Namespace, "")
			}
		}
		addClaimVolume(pod, name)
	}
}

func addClaimVolume(pod *corev1.Pod, claim string) {
	for _, volume := range pod.Spec.Volumes {
		if volume.PersistentVolumeClaim.ClaimName == claim {
			return
		}
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{
		Name:         fmt.Sprintf("data-%d", len(pod.Spec.Volumes)),
		VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}},
	})
}

// claim returns the name of a new claim of class, not bound.
func (s *storageState) claim(g *generator, namespace, class, size string) string {
	s.volumes++
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: fmt.Sprintf("claim-%04d", s.volumes)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(class),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
		},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending},
	}
	g.c.PersistentVolumeClaims = append(g.c.PersistentVolumeClaims, claim)
	return claim.Name
}

// boundClaim returns the name of a new claim bound to a new CSI volume in
// zone (anywhere when empty), as the PV controller leaves them.
func (s *storageState) boundClaim(g *generator, namespace, zone string) string {
	name := s.claim(g, namespace, pick(g, []string{ClassImmediate, ClassWFFC}), "10Gi")
	claim := g.c.PersistentVolumeClaims[len(g.c.PersistentVolumeClaims)-1]
	volume := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-" + namespace + "-" + name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      claim.Spec.Resources.Requests.DeepCopy(),
			AccessModes:                   claim.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              *claim.Spec.StorageClassName,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: CSIDriver, VolumeHandle: name}},
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: namespace, Name: name},
		},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeBound},
	}
	if zone != "" {
		volume.Labels = map[string]string{corev1.LabelTopologyZone: zone}
		volume.Spec.NodeAffinity = volumeNodeAffinity(corev1.LabelTopologyZone, zone)
	}
	claim.Annotations = map[string]string{BindCompletedAnnotation: "yes"}
	claim.Spec.VolumeName = volume.Name
	claim.Status = corev1.PersistentVolumeClaimStatus{
		Phase: corev1.ClaimBound, AccessModes: claim.Spec.AccessModes, Capacity: claim.Spec.Resources.Requests.DeepCopy(),
	}
	g.c.PersistentVolumes = append(g.c.PersistentVolumes, volume)
	s.boundClaims[namespace] = append(s.boundClaims[namespace], name)
	return name
}
