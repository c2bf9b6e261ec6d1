package snapshot

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

// PodInfo is a pod with what the simulator needs from it parsed once:
// requests, required inter-pod affinity terms and host ports.
// It is immutable once built.
type PodInfo struct {
	Pod *Pod
	// Identity is shared by pods with the same namespace and labels (as far
	// as the snapshot could tell cheaply), so that what a selector decides
	// for one it decides for all.
	Identity *Identity
	Requests Resources
	// RequiredAffinityTerms and RequiredAntiAffinityTerms are the pod's
	// requiredDuringSchedulingIgnoredDuringExecution terms.
	RequiredAffinityTerms     []AffinityTerm
	RequiredAntiAffinityTerms []AffinityTerm
	HostPorts                 []HostPort
	// Claims are the PersistentVolumeClaims of the pod's volumes.
	Claims []ClaimRef
}

// NewPodInfo parses pod. A term whose selector cannot be parsed matches
// no pod, the way kube-scheduler treats it.
func NewPodInfo(pod *corev1.Pod) *PodInfo {
	compact := NewPod(pod)
	return newPodInfo(compact, newIdentity(compact), nil)
}

// NewPodInfoOf is NewPodInfo with an identity from ids, shared with the
// other pods of the same namespace and labels that ids has seen.
func NewPodInfoOf(pod *corev1.Pod, ids *Identities) *PodInfo {
	compact := NewPod(pod)
	return newPodInfo(compact, ids.Intern(compact), nil)
}

// newPodInfo parses pod, reusing a resource list for the requests.
func newPodInfo(pod *Pod, identity *Identity, reuse corev1.ResourceList) *PodInfo {
	info := &PodInfo{
		Pod:       pod,
		Identity:  identity,
		Requests:  podRequests(pod, reuse),
		HostPorts: podHostPorts(pod),
		Claims:    podClaims(pod),
	}
	if affinity := pod.Spec.Affinity; affinity != nil {
		if affinity.PodAffinity != nil {
			info.RequiredAffinityTerms = newAffinityTerms(pod, affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution)
		}
		if affinity.PodAntiAffinity != nil {
			info.RequiredAntiAffinityTerms = newAffinityTerms(pod, affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution)
		}
	}
	return info
}

// Identity stands for the namespace and labels of pods; compare pointers.
type Identity struct {
	Namespace string
	Labels    map[string]string
}

func newIdentity(pod *Pod) *Identity {
	return &Identity{Namespace: pod.Namespace, Labels: pod.Labels}
}

// Identities interns identities: pods with the same namespace and labels
// get the same one, so that what the simulator remembers per identity
// (which selectors match) is decided once for all of them. The pods of a
// controller are compared with its earlier pods' labels, which is cheap;
// pods without a controller, such as bare pods of a batch system, are
// keyed by their namespace and labels.
type Identities struct {
	byOwner map[types.UID][]*Identity
	byKey   map[string]*Identity
	key     []byte
}

// NewIdentities returns an empty interner.
func NewIdentities() *Identities {
	return &Identities{byOwner: map[types.UID][]*Identity{}, byKey: map[string]*Identity{}}
}

// Intern returns the identity of an earlier pod with the same namespace
// and labels, or a new one.
func (ids *Identities) Intern(pod *Pod) *Identity {
	owner := pod.Controller()
	if owner == nil {
		ids.key = identityKey(ids.key[:0], pod)
		if known, ok := ids.byKey[string(ids.key)]; ok {
			return known
		}
		identity := newIdentity(pod)
		ids.byKey[string(ids.key)] = identity
		return identity
	}
	for _, known := range ids.byOwner[owner.UID] {
		if known.Namespace == pod.Namespace && maps.Equal(known.Labels, pod.Labels) {
			return known
		}
	}
	identity := newIdentity(pod)
	ids.byOwner[owner.UID] = append(ids.byOwner[owner.UID], identity)
	return identity
}

// identityKey appends the pod's namespace and labels to b.
func identityKey(b []byte, pod *Pod) []byte {
	return AppendLabels(append(append(b, pod.Namespace...), 0), pod.Labels)
}

// AppendLabels appends labels to b, sorted, each key and value ended by a
// zero byte, which they never hold, and the whole by one more: a key for
// maps of labels.
func AppendLabels(b []byte, labels map[string]string) []byte {
	// Sorted on the stack for the few labels most pods have: signatures
	// are made for every pod group of every simulation.
	var few [8]string
	keys := few[:0]
	for key := range labels {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	for _, key := range keys {
		b = append(append(append(append(b, key...), 0), labels[key]...), 0)
	}
	return append(b, 0)
}

// remember makes identity, of a pod parsed for an earlier snapshot, the
// one later pods of the same namespace and labels share.
func (ids *Identities) remember(pod *Pod, identity *Identity) {
	owner := pod.Controller()
	if owner == nil {
		ids.key = identityKey(ids.key[:0], pod)
		if _, ok := ids.byKey[string(ids.key)]; !ok {
			ids.byKey[string(ids.key)] = identity
		}
		return
	}
	if slices.Contains(ids.byOwner[owner.UID], identity) {
		return
	}
	ids.byOwner[owner.UID] = append(ids.byOwner[owner.UID], identity)
}

// parser parses the pods of one snapshot. A Pod keeps what was parsed of
// it for the snapshots that follow: an informer's cache hands out the same
// Pod for as long as the pod is unchanged, and replaces it when it
// changes.
type parser struct {
	ids   *Identities
	reuse corev1.ResourceList
}

func newParser() *parser {
	return &parser{ids: NewIdentities(), reuse: corev1.ResourceList{}}
}

func (p *parser) parse(pod *Pod) *PodInfo {
	if info := pod.parsed.Load(); info != nil {
		p.ids.remember(pod, info.Identity)
		return info
	}
	info := newPodInfo(pod, p.ids.Intern(pod), p.reuse)
	pod.parsed.Store(info)
	return info
}

// AffinityTerm is a parsed corev1.PodAffinityTerm.
type AffinityTerm struct {
	Selector labels.Selector
	// Namespaces are the namespaces listed by the term, or the pod's own
	// namespace when the term lists none and has no namespace selector.
	Namespaces        sets.Set[string]
	NamespaceSelector labels.Selector
	TopologyKey       string
}

// Matches tells whether pod, in a namespace with the given labels, is
// selected by the term.
func (t *AffinityTerm) Matches(pod *Pod, namespaceLabels labels.Set) bool {
	if t.Namespaces.Has(pod.Namespace) || t.NamespaceSelector.Matches(namespaceLabels) {
		return t.Selector.Matches(labels.Set(pod.Labels))
	}
	return false
}

func newAffinityTerms(pod *Pod, terms []corev1.PodAffinityTerm) []AffinityTerm {
	if len(terms) == 0 {
		return nil
	}
	parsed := make([]AffinityTerm, 0, len(terms))
	for i := range terms {
		term := &terms[i]
		selector, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
		if err != nil {
			selector = labels.Nothing()
		}
		namespaceSelector, err := metav1.LabelSelectorAsSelector(term.NamespaceSelector)
		if err != nil {
			namespaceSelector = labels.Nothing()
		}
		namespaces := sets.New(term.Namespaces...)
		if len(term.Namespaces) == 0 && term.NamespaceSelector == nil {
			namespaces.Insert(pod.Namespace)
		}
		parsed = append(parsed, AffinityTerm{
			Selector:          selector,
			Namespaces:        namespaces,
			NamespaceSelector: namespaceSelector,
			TopologyKey:       term.TopologyKey,
		})
	}
	return parsed
}

// HostPort is a port a pod binds on its node.
type HostPort struct {
	IP       string
	Protocol corev1.Protocol
	Port     int32
}

// wildcardIP binds every address of the node.
const wildcardIP = "0.0.0.0"

// ConflictsWith tells whether two host ports cannot be bound on one node.
func (p HostPort) ConflictsWith(other HostPort) bool {
	return p.Port == other.Port && p.Protocol == other.Protocol &&
		(p.IP == other.IP || p.IP == wildcardIP || other.IP == wildcardIP)
}

func podHostPorts(pod *Pod) []HostPort {
	var ports []HostPort
	add := func(containers []corev1.Container, sidecarsOnly bool) {
		for i := range containers {
			container := &containers[i]
			if sidecarsOnly && (container.RestartPolicy == nil || *container.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
				continue
			}
			for _, port := range container.Ports {
				if port.HostPort <= 0 {
					continue
				}
				hostPort := HostPort{IP: port.HostIP, Protocol: port.Protocol, Port: port.HostPort}
				if hostPort.IP == "" {
					hostPort.IP = wildcardIP
				}
				if hostPort.Protocol == "" {
					hostPort.Protocol = corev1.ProtocolTCP
				}
				ports = append(ports, hostPort)
			}
		}
	}
	add(pod.Spec.InitContainers, true)
	add(pod.Spec.Containers, false)
	return ports
}
