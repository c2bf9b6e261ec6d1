package envtest

import (
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// InfrastructureMachineTemplate is the kind of a stand-in for a provider's
// machine template (such as DockerMachineTemplate), for tests that need one
// to publish status.capacity and status.nodeInfo.
var InfrastructureMachineTemplate = schema.GroupVersionKind{
	Group:   "infrastructure.test.capi-autoscaler.io",
	Version: "v1alpha1",
	Kind:    "TestMachineTemplate",
}

// InfrastructureMachinePool is the kind of a stand-in for a provider's
// machine pool (such as DockerMachinePool), which MachinePools refer to.
var InfrastructureMachinePool = schema.GroupVersionKind{
	Group:   InfrastructureMachineTemplate.Group,
	Version: InfrastructureMachineTemplate.Version,
	Kind:    "TestMachinePool",
}

// OtherProviderMachineTemplate is the machine template kind of a second
// provider, in an API group of its own, for tests of a manager whose RBAC
// covers InfrastructureMachineTemplate's group and not this one.
var OtherProviderMachineTemplate = schema.GroupVersionKind{
	Group:   "infrastructure.other.capi-autoscaler.io",
	Version: "v1alpha1",
	Kind:    "OtherMachineTemplate",
}

// InfrastructureMachineTemplateCRD returns the CRD of
// InfrastructureMachineTemplate: any content is kept, and the contract label
// tells Cluster API which version to read, as a real provider's CRD does.
func InfrastructureMachineTemplateCRD() *apiextensionsv1.CustomResourceDefinition {
	return schemalessCRD(InfrastructureMachineTemplate)
}

// InfrastructureMachinePoolCRD returns the CRD of InfrastructureMachinePool,
// which keeps any content as InfrastructureMachineTemplateCRD does.
func InfrastructureMachinePoolCRD() *apiextensionsv1.CustomResourceDefinition {
	return schemalessCRD(InfrastructureMachinePool)
}

// OtherProviderMachineTemplateCRD returns the CRD of
// OtherProviderMachineTemplate, which keeps any content as
// InfrastructureMachineTemplateCRD does.
func OtherProviderMachineTemplateCRD() *apiextensionsv1.CustomResourceDefinition {
	return schemalessCRD(OtherProviderMachineTemplate)
}

func schemalessCRD(gvk schema.GroupVersionKind) *apiextensionsv1.CustomResourceDefinition {
	singular := strings.ToLower(gvk.Kind)
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{
			Name:   singular + "s." + gvk.Group,
			Labels: map[string]string{clusterv1.GroupVersion.String(): gvk.Version},
		},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: gvk.Group,
			Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Kind:     gvk.Kind,
				ListKind: gvk.Kind + "List",
				Plural:   singular + "s",
				Singular: singular,
			},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name:    gvk.Version,
				Served:  true,
				Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{
					OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
						Type:                   "object",
						XPreserveUnknownFields: ptr.To(true),
					},
				},
			}},
		},
	}
}
