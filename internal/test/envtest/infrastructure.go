package envtest

import (
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

// InfrastructureMachineTemplateCRD returns the CRD of
// InfrastructureMachineTemplate: any content is kept, and the contract label
// tells Cluster API which version to read, as a real provider's CRD does.
func InfrastructureMachineTemplateCRD() *apiextensionsv1.CustomResourceDefinition {
	gvk := InfrastructureMachineTemplate
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{
			Name:   "testmachinetemplates." + gvk.Group,
			Labels: map[string]string{clusterv1.GroupVersion.String(): gvk.Version},
		},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: gvk.Group,
			Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Kind:     gvk.Kind,
				ListKind: gvk.Kind + "List",
				Plural:   "testmachinetemplates",
				Singular: "testmachinetemplate",
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
