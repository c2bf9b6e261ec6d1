package snapshot

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/component-helpers/storage/ephemeral"
	storagehelpers "k8s.io/component-helpers/storage/volume"
)

// AttachLimitsAnnotation, on a node group's MachineDeployment or MachineSet,
// gives the CSI attach limits of nodes scaled from zero, the way the
// upstream Cluster API provider reads it: "driver=count" pairs separated by
// commas, e.g. "ebs.csi.aws.com=25". The template node carries it too.
const AttachLimitsAnnotation = "capacity.cluster-autoscaler.kubernetes.io/csi-driver"

// AttachLimits are, per CSI driver, how many volumes of the driver a node
// can have attached. A driver that is not listed has no limit.
type AttachLimits map[string]int

// ParseAttachLimits parses the value of AttachLimitsAnnotation.
func ParseAttachLimits(value string) (AttachLimits, error) {
	limits := AttachLimits{}
	for pair := range strings.SplitSeq(value, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		driver, count, found := strings.Cut(pair, "=")
		driver = strings.TrimSpace(driver)
		if !found || driver == "" {
			return nil, fmt.Errorf("%q is not driver=count", pair)
		}
		n, err := strconv.Atoi(strings.TrimSpace(count))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("the attach limit of %s, %q, is not a count", driver, count)
		}
		if _, duplicate := limits[driver]; duplicate {
			return nil, fmt.Errorf("driver %s is listed twice", driver)
		}
		limits[driver] = n
	}
	return limits, nil
}

// String formats the limits as AttachLimitsAnnotation does, drivers in
// order.
func (l AttachLimits) String() string {
	pairs := make([]string, 0, len(l))
	for _, driver := range slices.Sorted(maps.Keys(l)) {
		pairs = append(pairs, driver+"="+strconv.Itoa(l[driver]))
	}
	return strings.Join(pairs, ",")
}

// attachLimitsOf reads the limits a CSINode reports.
func attachLimitsOf(csiNode *storagev1.CSINode) AttachLimits {
	var limits AttachLimits
	for _, driver := range csiNode.Spec.Drivers {
		if driver.Allocatable == nil || driver.Allocatable.Count == nil {
			continue
		}
		if limits == nil {
			limits = AttachLimits{}
		}
		limits[driver.Name] = int(*driver.Allocatable.Count)
	}
	return limits
}

// ClaimRef is a PersistentVolumeClaim a pod uses, directly or through a
// generic ephemeral volume.
type ClaimRef struct {
	Name string
	// Ephemeral claims are made for the pod by the ephemeral volume
	// controller, and must be owned by it.
	Ephemeral bool
}

// podClaims returns the claims of the pod's volumes.
func podClaims(pod *Pod) []ClaimRef {
	var claims []ClaimRef
	for i := range pod.Spec.Volumes {
		volume := &pod.Spec.Volumes[i]
		switch {
		case volume.PersistentVolumeClaim != nil:
			claims = append(claims, ClaimRef{Name: volume.PersistentVolumeClaim.ClaimName})
		case volume.Ephemeral != nil:
			claims = append(claims, ClaimRef{Name: pod.Name + "-" + volume.Name, Ephemeral: true})
		}
	}
	return claims
}

// Storage is what the snapshot knows of the cluster's volumes, for the
// volume predicates: claims, persistent volumes and storage classes. It is
// read-only.
type Storage struct {
	claims  map[string]*corev1.PersistentVolumeClaim
	volumes map[string]*corev1.PersistentVolume
	classes map[string]*storagev1.StorageClass
	// byClass are the persistent volumes per storage class: what claims
	// of WaitForFirstConsumer classes may bind to.
	byClass map[string][]*corev1.PersistentVolume
	// err is why the storage objects could not be read.
	err error
}

func newStorage(in *Input) *Storage {
	s := &Storage{
		claims:  make(map[string]*corev1.PersistentVolumeClaim, len(in.PersistentVolumeClaims)),
		volumes: make(map[string]*corev1.PersistentVolume, len(in.PersistentVolumes)),
		classes: make(map[string]*storagev1.StorageClass, len(in.StorageClasses)),
		byClass: map[string][]*corev1.PersistentVolume{},
		err:     in.StorageError,
	}
	for _, claim := range in.PersistentVolumeClaims {
		s.claims[claim.Namespace+"/"+claim.Name] = claim
	}
	for _, volume := range in.PersistentVolumes {
		s.volumes[volume.Name] = volume
		class := storagehelpers.GetPersistentVolumeClass(volume)
		s.byClass[class] = append(s.byClass[class], volume)
	}
	for _, class := range in.StorageClasses {
		s.classes[class.Name] = class
	}
	return s
}

// Err is why the storage objects could not be read; nil when they were.
// Pods with claims cannot be evaluated without them.
func (s *Storage) Err() error { return s.err }

// Claim returns the named claim, nil when there is none.
func (s *Storage) Claim(namespace, name string) *corev1.PersistentVolumeClaim {
	return s.claims[namespace+"/"+name]
}

// Volume returns the named persistent volume, nil when there is none.
func (s *Storage) Volume(name string) *corev1.PersistentVolume { return s.volumes[name] }

// Class returns the named storage class, nil when there is none.
func (s *Storage) Class(name string) *storagev1.StorageClass { return s.classes[name] }

// VolumesOfClass are the persistent volumes of a storage class, bound or
// not. Do not modify the slice.
func (s *Storage) VolumesOfClass(class string) []*corev1.PersistentVolume {
	return s.byClass[class]
}

// ClaimIsForPod tells whether an ephemeral claim was made for pod, as
// kube-scheduler requires; the error says why not.
func ClaimIsForPod(pod *Pod, claim *corev1.PersistentVolumeClaim) error {
	return ephemeral.VolumeIsForPod(&corev1.Pod{ObjectMeta: pod.objectMeta()}, claim)
}
