package v1alpha1_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
)

// The kubebuilder markers repeat the bounds and defaults Go code takes from
// the API package: the CRD generated from them has the same.
func TestBoundsAreTheCRDs(t *testing.T) {
	g := NewWithT(t)
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", "autoscaling.cluster.x-k8s.io_clusterautoscalers.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	var crd apiextensionsv1.CustomResourceDefinition
	g.Expect(yaml.Unmarshal(data, &crd)).To(Succeed())
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	property := func(path string) apiextensionsv1.JSONSchemaProps {
		p := spec
		for _, name := range strings.Split(path, ".") {
			child, ok := p.Properties[name]
			g.Expect(ok).To(BeTrue(), "the CRD has no spec.%s", path)
			p = child
		}
		return p
	}

	g.Expect(string(property("logVerbosity").Default.Raw)).To(Equal("1"))
	g.Expect(autoscalingv1alpha1.DefaultLogVerbosity).To(Equal(1))
	g.Expect(property("logVerbosity").Maximum).To(HaveValue(BeNumerically("==", autoscalingv1alpha1.MaxLogVerbosity)))
	g.Expect(property("scaleDown.maxDrainParallelism").Maximum).To(HaveValue(BeNumerically("==", autoscalingv1alpha1.MaxDrainParallelism)))
	g.Expect(property("startupTaints").MaxItems).To(HaveValue(BeNumerically("==", autoscalingv1alpha1.MaxTaintKeys)))
	g.Expect(property("statusTaints").MaxItems).To(HaveValue(BeNumerically("==", autoscalingv1alpha1.MaxTaintKeys)))
	g.Expect(property("startupTaints").Items.Schema.MaxLength).To(HaveValue(BeNumerically("==", autoscalingv1alpha1.MaxLabelKeyLength)))
	g.Expect(property("balancingIgnoredLabels").MaxItems).To(HaveValue(BeNumerically("==", autoscalingv1alpha1.MaxBalancingIgnoredLabels)))
	g.Expect(property("balancingIgnoredLabels").Items.Schema.MaxLength).To(HaveValue(BeNumerically("==", autoscalingv1alpha1.MaxLabelKeyLength)))
	g.Expect(property("resourceLimits.gpus").MaxItems).To(HaveValue(BeNumerically("==", autoscalingv1alpha1.MaxGPULimits)))
	g.Expect(property("expanderPriorities").MaxItems).To(HaveValue(BeNumerically("==", autoscalingv1alpha1.MaxExpanderPriorities)))
	patterns := property("expanderPriorities").Items.Schema.Properties["nodeGroupIDPatterns"]
	g.Expect(patterns.MaxItems).To(HaveValue(BeNumerically("==", autoscalingv1alpha1.MaxNodeGroupIDPatterns)))
	g.Expect(patterns.Items.Schema.MaxLength).To(HaveValue(BeNumerically("==", autoscalingv1alpha1.MaxNodeGroupIDPatternLength)))
	g.Expect(property("instanceTypePrices").Items.Schema.Properties["price"].Pattern).To(Equal(pricing.DecimalPattern))
	g.Expect(property("expanders").MaxItems).To(HaveValue(BeNumerically("==", len(property("expanders").Items.Schema.Enum))), "every expander once")
	g.Expect(property("consolidation.budget.nodes").Pattern).To(Equal(autoscalingv1alpha1.DisruptionBudgetPattern))
	g.Expect(property("consolidation.budgets").Items.Schema.Properties["nodes"].Pattern).To(Equal(autoscalingv1alpha1.DisruptionBudgetPattern))
	g.Expect(property("consolidation.budgets").Items.Schema.Properties["schedule"].Pattern).To(
		Equal(property("scheduledMinimums").Items.Schema.Properties["schedule"].Pattern), "one cron syntax")
	g.Expect(property("consolidation.policy").Enum).To(HaveLen(4), "Disabled, Delete, Replace and Balanced")
	g.Expect(property("clusterName").MaxLength).To(HaveValue(BeNumerically("==", autoscalingv1alpha1.MaxClusterNameLength)))
	g.Expect(property("scanInterval").XValidations).To(ContainElement(HaveField("Rule",
		ContainSubstring("duration('"+autoscalingv1alpha1.MinScanInterval.String()+"')"))))
}
