package simulator

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	storagehelpers "k8s.io/component-helpers/storage/volume"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// Reasons of the volume predicates, worded like kube-scheduler's
// VolumeBinding, VolumeZone and NodeVolumeLimits plugins.
const (
	ReasonVolumeNodeAffinity      = "node(s) didn't match PersistentVolume's node affinity"
	ReasonVolumeBindConflict      = "node(s) didn't find available persistent volumes to bind"
	ReasonVolumeZone              = "node(s) had no available volume zone"
	ReasonMaxVolumeCount          = "node(s) exceed max volume count"
	ReasonUnboundImmediateClaims  = "pod has unbound immediate PersistentVolumeClaims"
	reasonVolumesNotEvaluatedText = "volumes not evaluated: %v"
)

// ReasonVolumesNotEvaluated is the reason of pods with claims when the
// storage objects could not be read: they are reported, not guessed.
func ReasonVolumesNotEvaluated(err error) string {
	return fmt.Sprintf(reasonVolumesNotEvaluatedText, err)
}

const (
	// annBindCompleted marks a claim whose binding the PV controller
	// completed; kube-scheduler treats a claim without it as unbound.
	annBindCompleted = "pv.kubernetes.io/bind-completed"
	// annSelectedNode is the node kube-scheduler chose for a claim that is
	// being provisioned.
	annSelectedNode = "volume.kubernetes.io/selected-node"
	// noProvisioner is the provisioner of storage classes of static
	// volumes only.
	noProvisioner = "kubernetes.io/no-provisioner"
)

// zoneLabels are the node labels a persistent volume's zone and region
// labels are matched with, as kube-scheduler's VolumeZone plugin does.
var zoneLabels = []string{
	corev1.LabelFailureDomainBetaZone, corev1.LabelFailureDomainBetaRegion,
	corev1.LabelTopologyZone, corev1.LabelTopologyRegion,
}

// podVolumes is what the volume predicates need of a pod group, resolved
// once against the snapshot's storage objects, as kube-scheduler's
// PreFilter does.
type podVolumes struct {
	// unresolvable is why the pods fit no node whatever the node: a claim
	// missing or unbound with immediate binding, or storage objects that
	// could not be read.
	unresolvable string
	// bound are the persistent volumes of the claims bound to one.
	bound []*corev1.PersistentVolume
	// delayed are the unbound claims of WaitForFirstConsumer classes,
	// smallest first, as kube-scheduler matches them.
	delayed []*corev1.PersistentVolumeClaim
	// zones are the zone and region labels of the bound volumes.
	zones []volumeZone
	// attachments are the volumes that count against CSI attach limits.
	attachments []attachment

	index *volumeIndex
}

type volumeZone struct {
	label  string
	values map[string]struct{}
}

// attachment is a volume attached to a node through a CSI driver; unique
// tells volumes apart across pods.
type attachment struct{ unique, driver string }

// volumeIndex resolves pods' volumes against a snapshot's storage, and
// remembers what placed pods attach. The branches of a scheduler share it:
// the storage is only read, and what a pod attaches depends on nothing
// else.
type volumeIndex struct {
	storage *snapshot.Storage
	// attached holds, by *snapshot.Pod, the []attachment of the pod.
	attached sync.Map
}

func newVolumeIndex(storage *snapshot.Storage) *volumeIndex {
	return &volumeIndex{storage: storage}
}

// resolve resolves the volumes of a pod to be placed; nil when it has no
// claims.
func (idx *volumeIndex) resolve(info *snapshot.PodInfo) *podVolumes {
	if len(info.Claims) == 0 {
		return nil
	}
	volumes := &podVolumes{index: idx}
	if err := idx.storage.Err(); err != nil {
		volumes.unresolvable = ReasonVolumesNotEvaluated(err)
		return volumes
	}
	pod := info.Pod
	claims := make([]*corev1.PersistentVolumeClaim, 0, len(info.Claims))
	for _, ref := range info.Claims {
		claim, reason := idx.claimOf(pod, ref)
		if reason != "" {
			volumes.unresolvable = reason
			return volumes
		}
		claims = append(claims, claim)
	}
	for _, claim := range claims {
		switch {
		case fullyBound(claim):
			volume := idx.storage.Volume(claim.Spec.VolumeName)
			if volume == nil {
				volumes.unresolvable = fmt.Sprintf("persistentvolume %q not found", claim.Spec.VolumeName)
				return volumes
			}
			volumes.bound = append(volumes.bound, volume)
			volumes.zones = append(volumes.zones, zonesOf(volume)...)
		case claim.Spec.VolumeName == "" && idx.delayedBinding(claim):
			volumes.delayed = append(volumes.delayed, claim)
		default:
			// Prebound claims count as immediate too: the PV controller
			// has to finish binding them before the pod can go anywhere.
			volumes.unresolvable = ReasonUnboundImmediateClaims
			return volumes
		}
	}
	slices.SortStableFunc(volumes.delayed, func(a, b *corev1.PersistentVolumeClaim) int {
		request := storageRequest(a)
		return request.Cmp(storageRequest(b))
	})
	volumes.attachments = idx.attachmentsOf(pod, claims)
	return volumes
}

// claimOf finds a pod's claim, or says why the pod cannot be scheduled
// without it, in kube-scheduler's words.
func (idx *volumeIndex) claimOf(pod *snapshot.Pod, ref snapshot.ClaimRef) (*corev1.PersistentVolumeClaim, string) {
	claim := idx.storage.Claim(pod.Namespace, ref.Name)
	switch {
	case claim == nil && ref.Ephemeral:
		return nil, fmt.Sprintf("waiting for ephemeral volume controller to create the persistentvolumeclaim %q", ref.Name)
	case claim == nil:
		return nil, fmt.Sprintf("persistentvolumeclaim %q not found", ref.Name)
	case claim.Status.Phase == corev1.ClaimLost:
		return nil, fmt.Sprintf("persistentvolumeclaim %q bound to non-existent persistentvolume %q", claim.Name, claim.Spec.VolumeName)
	case claim.DeletionTimestamp != nil:
		return nil, fmt.Sprintf("persistentvolumeclaim %q is being deleted", claim.Name)
	}
	if ref.Ephemeral {
		if err := snapshot.ClaimIsForPod(pod, claim); err != nil {
			return nil, err.Error()
		}
	}
	return claim, ""
}

func fullyBound(claim *corev1.PersistentVolumeClaim) bool {
	return claim.Spec.VolumeName != "" && metav1.HasAnnotation(claim.ObjectMeta, annBindCompleted)
}

// delayedBinding tells whether the claim's class binds when a pod using
// it is scheduled. A class that does not exist binds at once.
func (idx *volumeIndex) delayedBinding(claim *corev1.PersistentVolumeClaim) bool {
	class := idx.storage.Class(storagehelpers.GetPersistentVolumeClaimClass(claim))
	return class != nil && class.VolumeBindingMode != nil && *class.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer
}

func storageRequest(claim *corev1.PersistentVolumeClaim) resource.Quantity {
	return claim.Spec.Resources.Requests[corev1.ResourceStorage]
}

// zonesOf reads the zone and region labels of a volume; one whose value
// cannot be parsed is ignored, as kube-scheduler does.
func zonesOf(volume *corev1.PersistentVolume) []volumeZone {
	var zones []volumeZone
	for _, label := range zoneLabels {
		value, ok := volume.Labels[label]
		if !ok {
			continue
		}
		if zone, ok := parseZones(label, value); ok {
			zones = append(zones, zone)
		}
	}
	return zones
}

// parseZones parses a zone label's value, zones separated by "__".
func parseZones(label, value string) (volumeZone, bool) {
	zone := volumeZone{label: label, values: map[string]struct{}{}}
	for z := range strings.SplitSeq(value, "__") {
		z = strings.TrimSpace(z)
		if z == "" {
			return volumeZone{}, false
		}
		zone.values[z] = struct{}{}
	}
	return zone, true
}

// attachmentsOf returns the volumes of claims that count against CSI
// attach limits: those of CSI persistent volumes, or, not yet bound, of a
// class whose provisioner is a CSI driver.
func (idx *volumeIndex) attachmentsOf(pod *snapshot.Pod, claims []*corev1.PersistentVolumeClaim) []attachment {
	var attachments []attachment
	for _, claim := range claims {
		if volume := idx.storage.Volume(claim.Spec.VolumeName); claim.Spec.VolumeName != "" && volume != nil {
			if csi := volume.Spec.CSI; csi != nil {
				attachments = append(attachments, attachment{unique: csi.Driver + "/" + csi.VolumeHandle, driver: csi.Driver})
			}
			continue
		}
		class := idx.storage.Class(storagehelpers.GetPersistentVolumeClaimClass(claim))
		if class == nil {
			continue
		}
		// Claims not bound yet are told apart by name.
		attachments = append(attachments, attachment{unique: class.Provisioner + "/claim/" + pod.Namespace + "/" + claim.Name, driver: class.Provisioner})
	}
	return attachments
}

// attachedTo returns what a placed pod attaches to its node. Claims that
// cannot be found are not counted, as kube-scheduler does.
func (idx *volumeIndex) attachedTo(info *snapshot.PodInfo) []attachment {
	if len(info.Claims) == 0 {
		return nil
	}
	if attached, ok := idx.attached.Load(info.Pod); ok {
		return attached.([]attachment)
	}
	var claims []*corev1.PersistentVolumeClaim
	for _, ref := range info.Claims {
		if claim := idx.storage.Claim(info.Pod.Namespace, ref.Name); claim != nil {
			claims = append(claims, claim)
		}
	}
	attached := idx.attachmentsOf(info.Pod, claims)
	idx.attached.Store(info.Pod, attached)
	return attached
}

// check runs the volume predicates in kube-scheduler's order on a node
// and returns the reason of the first that fails; "" when the pod fits.
// Failures last: placing pods only attaches more volumes.
func (v *podVolumes) check(nodeInfo *snapshot.NodeInfo) string {
	if v.unresolvable != "" {
		return v.unresolvable
	}
	if v.exceedsAttachLimits(nodeInfo) {
		return ReasonMaxVolumeCount
	}
	node := nodeInfo.Node()
	for _, volume := range v.bound {
		if storagehelpers.CheckNodeAffinity(volume, node.Labels) != nil {
			return ReasonVolumeNodeAffinity
		}
	}
	if !v.delayedClaimsFit(node) {
		return ReasonVolumeBindConflict
	}
	if !v.zonesMatch(node) {
		return ReasonVolumeZone
	}
	return ""
}

// exceedsAttachLimits counts the pod's new volumes per driver on top of
// those the node's pods attach.
func (v *podVolumes) exceedsAttachLimits(nodeInfo *snapshot.NodeInfo) bool {
	limits := nodeInfo.AttachLimits()
	limited := func(a attachment) bool { _, ok := limits[a.driver]; return ok }
	if len(limits) == 0 || !slices.ContainsFunc(v.attachments, limited) {
		return false
	}
	attached := map[string]string{}
	for _, pod := range nodeInfo.Pods() {
		for _, a := range v.index.attachedTo(pod) {
			attached[a.unique] = a.driver
		}
	}
	// Only the drivers of new volumes are checked, as kube-scheduler
	// does: a node already over a limit still takes pods whose volumes
	// it has.
	added := map[string]int{}
	seen := map[string]bool{}
	for _, a := range v.attachments {
		if _, ok := attached[a.unique]; ok || seen[a.unique] {
			continue
		}
		seen[a.unique] = true
		added[a.driver]++
	}
	perDriver := map[string]int{}
	for _, driver := range attached {
		perDriver[driver]++
	}
	for driver, count := range added {
		if limit, ok := limits[driver]; ok && perDriver[driver]+count > limit {
			return true
		}
	}
	return false
}

// delayedClaimsFit tells whether the unbound WaitForFirstConsumer claims
// can be bound to available volumes reachable from node, or else
// provisioned for it.
func (v *podVolumes) delayedClaimsFit(node *corev1.Node) bool {
	if len(v.delayed) == 0 {
		return true
	}
	chosen := map[string]*corev1.PersistentVolume{}
	for _, claim := range v.delayed {
		if selected, ok := claim.Annotations[annSelectedNode]; ok {
			if selected != node.Name {
				return false
			}
			if !v.provisionable(claim, node) {
				return false
			}
			continue
		}
		class := storagehelpers.GetPersistentVolumeClaimClass(claim)
		volume, err := storagehelpers.FindMatchingVolume(claim, v.index.storage.VolumesOfClass(class), node, chosen, true, true)
		if err != nil {
			return false
		}
		if volume != nil {
			chosen[volume.Name] = volume
			continue
		}
		if !v.provisionable(claim, node) {
			return false
		}
	}
	return true
}

// provisionable tells whether the claim's class can provision a volume
// reachable from node. Storage capacity is not simulated.
func (v *podVolumes) provisionable(claim *corev1.PersistentVolumeClaim, node *corev1.Node) bool {
	class := v.index.storage.Class(storagehelpers.GetPersistentVolumeClaimClass(claim))
	if class == nil || class.Provisioner == "" || class.Provisioner == noProvisioner {
		return false
	}
	return matchesTopology(class.AllowedTopologies, node.Labels)
}

// matchesTopology tells whether node labels satisfy any of the terms; no
// terms match every node, an empty term none.
func matchesTopology(terms []corev1.TopologySelectorTerm, nodeLabels map[string]string) bool {
	if len(terms) == 0 {
		return true
	}
	return slices.ContainsFunc(terms, func(term corev1.TopologySelectorTerm) bool {
		return len(term.MatchLabelExpressions) > 0 && !slices.ContainsFunc(term.MatchLabelExpressions, func(requirement corev1.TopologySelectorLabelRequirement) bool {
			value, ok := nodeLabels[requirement.Key]
			return !ok || !slices.Contains(requirement.Values, value)
		})
	})
}

// zonesMatch checks the bound volumes' zone labels against the node's;
// a node without any zone or region label takes any volume.
func (v *podVolumes) zonesMatch(node *corev1.Node) bool {
	if len(v.zones) == 0 || !slices.ContainsFunc(zoneLabels, func(label string) bool { _, ok := node.Labels[label]; return ok }) {
		return true
	}
	for _, zone := range v.zones {
		value, ok := node.Labels[zone.label]
		if !ok {
			value, ok = node.Labels[gaZoneLabel(zone.label)]
		}
		if _, in := zone.values[value]; !ok || !in {
			return false
		}
	}
	return true
}

// gaZoneLabel is the GA label of a beta zone or region label.
func gaZoneLabel(label string) string {
	switch label {
	case corev1.LabelFailureDomainBetaZone:
		return corev1.LabelTopologyZone
	case corev1.LabelFailureDomainBetaRegion:
		return corev1.LabelTopologyRegion
	}
	return label
}
