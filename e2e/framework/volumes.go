package framework

import (
	"context"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// bindCompletedAnnotation marks a claim the PV controller has bound; with
// spec.volumeName it is what kube-scheduler takes for a bound claim.
const bindCompletedAnnotation = "pv.kubernetes.io/bind-completed"

// StatefulSetInput describes a StatefulSet of pause pods with one volume
// claim template.
type StatefulSetInput struct {
	// Client talks to the workload cluster.
	Client    client.Client
	Namespace string
	Name      string
	Replicas  int32
	// Requests of the pod's only container.
	Requests corev1.ResourceList
	// NodeSelector of the pods; include ClusterLabel to keep them on the
	// spec's Cluster.
	NodeSelector map[string]string
	// ClaimTemplate names the volume claim template: pod i uses the claim
	// <ClaimTemplate>-<Name>-<i>.
	ClaimTemplate string
}

// CreateStatefulSet creates a StatefulSet whose pods start in parallel,
// each with its own claim. Create the claims first (CreateBoundClaims): the
// StatefulSet controller then uses them as they are.
func CreateStatefulSet(ctx context.Context, input StatefulSetInput) *appsv1.StatefulSet {
	labels := map[string]string{"app": input.Name}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: input.Namespace, Name: input.Name},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To(input.Replicas),
			// All pods pending at once, as a burst, not one after the other.
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                  input.NodeSelector,
					TerminationGracePeriodSeconds: ptr.To[int64](0),
					Containers: []corev1.Container{{
						Name:         "app",
						Image:        "registry.k8s.io/pause:3.10",
						Resources:    corev1.ResourceRequirements{Requests: input.Requests},
						VolumeMounts: []corev1.VolumeMount{{Name: input.ClaimTemplate, MountPath: "/data"}},
					}},
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: input.ClaimTemplate},
				Spec:       claimSpec(),
			}},
		},
	}
	Expect(input.Client.Create(ctx, sts)).To(Succeed())
	return sts
}

// StatefulSetClaims are the names of the claims of a StatefulSet's pods.
func StatefulSetClaims(claimTemplate, name string, replicas int) []string {
	claims := make([]string, 0, replicas)
	for i := range replicas {
		claims = append(claims, claimTemplate+"-"+name+"-"+strconv.Itoa(i))
	}
	return claims
}

// StatefulSetPods lists the pods of a StatefulSet created by
// CreateStatefulSet.
func StatefulSetPods(ctx context.Context, g Gomega, c client.Client, sts *appsv1.StatefulSet) []corev1.Pod {
	return PodsSelected(ctx, g, c, sts.Namespace, sts.Spec.Selector)
}

// WaitForStatefulSetPodsRunning waits until every pod of sts runs and
// returns the pods.
func WaitForStatefulSetPodsRunning(ctx context.Context, c client.Client, sts *appsv1.StatefulSet, timeout time.Duration) []corev1.Pod {
	return waitForPodsRunning(ctx, c, "StatefulSet "+sts.Name, sts.Namespace, sts.Spec.Selector,
		int(ptr.Deref(sts.Spec.Replicas, 1)), timeout)
}

// DeleteStatefulSet deletes a StatefulSet and waits until its pods are
// gone, so that its Nodes drain at once when the Cluster goes.
func DeleteStatefulSet(ctx context.Context, c client.Client, sts *appsv1.StatefulSet) {
	GinkgoHelper()
	Expect(c.Delete(ctx, sts, client.PropagationPolicy(metav1.DeletePropagationForeground))).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(StatefulSetPods(ctx, g, c, sts)).To(BeEmpty())
		err := c.Get(ctx, client.ObjectKeyFromObject(sts), &appsv1.StatefulSet{})
		g.Expect(err).To(Satisfy(apierrors.IsNotFound))
	}, DeletionTimeout, AutoscalerPoll).Should(Succeed(), "StatefulSet %s is not gone", sts.Name)
}

// CreateBoundClaimsInput is the input of CreateBoundClaims.
type CreateBoundClaimsInput struct {
	// Client talks to the workload cluster.
	Client    client.Client
	Namespace string
	// Claims to create, each bound to a PersistentVolume of its own.
	Claims []string
	// Driver is the CSI driver of the volumes.
	Driver string
	// Zone, when set, is the only zone the volumes can be used in, as for a
	// zonal disk: their node affinity requires it and they carry its label.
	Zone string
}

// CreateBoundClaims creates claims bound to PersistentVolumes of a CSI
// driver, the way a statically provisioned volume is reserved for a claim:
// the volume's claimRef names the claim, the claim's volumeName names the
// volume, and kube-controller-manager's PV controller completes the binding
// (a claim created already bound, with the bind-completed annotation, is
// marked Lost if the controller syncs it before it knows the volume).
// It waits until every claim is Bound, and deletes the volumes after the
// spec (the claims go with the namespace). It returns the volumes by claim.
func CreateBoundClaims(ctx context.Context, input CreateBoundClaimsInput) map[string]*corev1.PersistentVolume {
	volumes := make(map[string]*corev1.PersistentVolume, len(input.Claims))
	for _, claim := range input.Claims {
		spec := claimSpec()
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: input.Namespace + "-" + claim},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: spec.Resources.Requests[corev1.ResourceStorage]},
				AccessModes:                   spec.AccessModes,
				StorageClassName:              *spec.StorageClassName,
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				ClaimRef:                      &corev1.ObjectReference{Namespace: input.Namespace, Name: claim},
				PersistentVolumeSource: corev1.PersistentVolumeSource{
					CSI: &corev1.CSIPersistentVolumeSource{Driver: input.Driver, VolumeHandle: input.Namespace + "/" + claim},
				},
			},
		}
		if input.Zone != "" {
			pv.Labels = map[string]string{corev1.LabelTopologyZone: input.Zone}
			pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{input.Zone},
				}}}},
			}}
		}
		Expect(input.Client.Create(ctx, pv)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			// Its protection finalizer holds it until its claim is gone
			// with the namespace.
			Expect(client.IgnoreNotFound(input.Client.Delete(ctx, pv))).To(Succeed())
		})
		volumes[claim] = pv
	}
	// A claim synced before its volume is known stays Pending until the
	// controller's next resync (15 s): let it see the volumes first.
	Eventually(func(g Gomega) {
		for _, pv := range volumes {
			g.Expect(input.Client.Get(ctx, client.ObjectKeyFromObject(pv), pv)).To(Succeed())
			g.Expect(pv.Status.Phase).To(Equal(corev1.VolumeAvailable), "PersistentVolume %s", pv.Name)
		}
	}, ClusterReadyTimeout, PollInterval).Should(Succeed())
	for claim, pv := range volumes {
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: input.Namespace, Name: claim},
			Spec:       claimSpec(),
		}
		pvc.Spec.VolumeName = pv.Name
		Expect(input.Client.Create(ctx, pvc)).To(Succeed())
	}
	Eventually(func(g Gomega) {
		for claim, pv := range volumes {
			pvc := &corev1.PersistentVolumeClaim{}
			g.Expect(input.Client.Get(ctx, client.ObjectKey{Namespace: input.Namespace, Name: claim}, pvc)).To(Succeed())
			g.Expect(pvc.Status.Phase).To(Equal(corev1.ClaimBound), "claim %s", claim)
			g.Expect(pvc.Annotations).To(HaveKeyWithValue(bindCompletedAnnotation, "yes"), "claim %s", claim)
			g.Expect(input.Client.Get(ctx, client.ObjectKeyFromObject(pv), pv)).To(Succeed())
			g.Expect(pv.Status.Phase).To(Equal(corev1.VolumeBound), "PersistentVolume %s", pv.Name)
		}
	}, ClusterReadyTimeout, PollInterval).Should(Succeed(), "the PV controller did not bind the claims")
	return volumes
}

// claimSpec is the spec of every claim and claim template of the volume
// specs: 1Gi, read-write by one node, and explicitly no storage class, so
// that a default class never applies.
func claimSpec() corev1.PersistentVolumeClaimSpec {
	return corev1.PersistentVolumeClaimSpec{
		AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		StorageClassName: ptr.To(""),
		Resources: corev1.VolumeResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
		},
	}
}

// CSIDriverRegistrarInput is the input of StartCSIDriverRegistrar.
type CSIDriverRegistrarInput struct {
	// Client talks to the workload cluster.
	Client client.Client
	// NodeLabels select the Nodes the driver runs on.
	NodeLabels map[string]string
	// Driver is the CSI driver's name.
	Driver string
	// Allocatable is how many volumes of the driver a Node can attach.
	Allocatable int32
	// StartupTaint, removed from a Node once its CSINode reports the
	// driver, keeps pods off the Node until kube-scheduler knows its limit.
	StartupTaint string
}

// StartCSIDriverRegistrar does for every selected Node, as it registers,
// what a kubelet and the driver's node-driver-registrar do: it creates the
// Node's CSINode with the driver and its attach limit, then removes the
// startup taint. kwok's Nodes have no kubelet, and kube-scheduler honours
// attach limits only on Nodes that have a CSINode. It stops after the spec,
// and deletes the CSINodes it created.
func StartCSIDriverRegistrar(ctx context.Context, input CSIDriverRegistrarInput) {
	startNodeAgent(ctx, nodeAgent{
		name: "CSI driver registrar", client: input.Client, nodeLabels: input.NodeLabels, startupTaint: input.StartupTaint,
		publish: func(node *corev1.Node) []client.Object {
			return []client.Object{&storagev1.CSINode{
				ObjectMeta: metav1.ObjectMeta{Name: node.Name, OwnerReferences: ownedByNode(node)},
				Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{
					Name:        input.Driver,
					NodeID:      node.Name,
					Allocatable: &storagev1.VolumeNodeResources{Count: ptr.To(input.Allocatable)},
				}}},
			}}
		},
	})
}

// ExpectReplicasTrajectory fails unless a group's replicas, as the
// invariant watches saw them, went exactly through want: e.g. 0→2 for one
// scale-up to 2, with no step between and nothing beyond.
func ExpectReplicasTrajectory(trajectory []ReplicasSeen, want ...int32) {
	GinkgoHelper()
	got := make([]int32, 0, len(trajectory))
	for _, seen := range trajectory {
		got = append(got, seen.Replicas)
	}
	Expect(got).To(Equal(want), "replicas went %s", FormatTrajectory(trajectory))
}
