// Package convert is `kubectl capi-autoscaler convert`: the configuration
// of an upstream cluster-autoscaler (a Deployment, a command line, Helm
// values) as a ClusterAutoscaler, with a report of what became of each
// flag. What it writes passes the manager's own checks (engineconfig).
package convert

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	utilclock "k8s.io/utils/clock"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/internal/engineconfig"
)

// convertInput is the configuration of an upstream cluster-autoscaler, as
// a Deployment, a command line or Helm values give it.
type convertInput struct {
	// source says where it comes from, for the report.
	source string
	// args is the command line, the program name first.
	args []string
	// chartDefaults are the flags the Helm chart's defaults set, and the
	// user's values did not.
	chartDefaults map[string]bool
	// image is the upstream container image, whose tag gives the release.
	image string
	// secretOf is the Secret a file of the upstream container comes from,
	// when it is known.
	secretOf func(path string) (secretFile, bool)
	// priorities configure the priority expander, from the Helm values or
	// the priority ConfigMap; prioritiesSource says which.
	priorities       []autoscalingv1alpha1.ExpanderPriority
	prioritiesSource string
	// warnings are what reading the input found amiss.
	warnings []string
}

// secretFile is a file of a Secret volume: the Secret and its key.
type secretFile struct {
	namespace, name, key string
}

// convertOptions are convert's own flags.
type convertOptions struct {
	name, namespace, clusterName string
	mode                         autoscalingv1alpha1.Mode
	// upstreamVersion is the upstream release whose defaults apply, such
	// as 1.32; empty to read it from the image tag.
	upstreamVersion string
}

// convertReport says what became of each upstream flag.
type convertReport struct {
	source   string
	upstream string
	mapped   []mappedFlag
	unmapped []unmappedFlag
	// defaults are the upstream defaults, of flags not given, that differ
	// from ours.
	defaults   []differingDefault
	nodeGroups []nodeGroupBounds
	warnings   []string
}

type mappedFlag struct {
	flag, field, value, note string
	chartDefault             bool
}

type unmappedFlag struct {
	flag, reason string
	chartDefault bool
}

type differingDefault struct {
	flag, field, upstream, ours, note string
}

// nodeGroupBounds are the sizes --nodes gives a node group, which capi-autoscaler
// reads from annotations of the node group.
type nodeGroupBounds struct {
	kind, namespace, name string
	min, max              int32
}

// conversion is a conversion in progress.
type conversion struct {
	in     convertInput
	opts   convertOptions
	spec   caSpec
	report convertReport
	// minor is the upstream minor release whose defaults apply.
	minor int
	// cluster and namespace are the Cluster the ClusterAutoscaler is for.
	cluster, namespace string
	// given are the flags given; setBy the flag that set each field.
	given map[string]bool
	setBy map[string]string
}

// converted is the result of a conversion.
type converted struct {
	object autoscalingv1alpha1.ClusterAutoscaler
	report convertReport
}

// flagIndex finds the rows of flagTable by flag name.
type flagIndex map[string]*flagMapping

func newFlagIndex(table []flagMapping) flagIndex {
	index := flagIndex{}
	for i := range table {
		index[table[i].flag] = &table[i]
	}
	return index
}

func (x flagIndex) isBool(name string) bool {
	row := x[name]
	return row != nil && row.boolean
}

var flagsByName = newFlagIndex(flagTable)

// convert turns an upstream configuration into a ClusterAutoscaler and a
// report. It fails only when there is nothing to convert: another cloud
// provider than clusterapi, or no Cluster; anything else is a warning.
func convert(in convertInput, opts convertOptions) (*converted, error) {
	c := &conversion{in: in, opts: opts, given: map[string]bool{}, setBy: map[string]string{}}
	c.report.source = in.source
	c.report.warnings = append(c.report.warnings, in.warnings...)
	c.minor, c.report.upstream = upstreamRelease(opts.upstreamVersion, in.image)
	parsed, warnings := parseUpstreamArgs(in.args, flagsByName)
	c.report.warnings = append(c.report.warnings, warnings...)
	if err := c.identify(parsed); err != nil {
		return nil, err
	}
	c.applyFlags(parsed)
	c.finishExpanders()
	c.checkBackoff()
	c.warnOfUpstreamDefaults()
	if err := managerRefuses(c.spec); err != nil {
		return nil, fmt.Errorf("the manager would refuse the converted ClusterAutoscaler: %w", err)
	}
	c.compareDefaults()
	return &converted{object: c.object(), report: c.report}, nil
}

// managerRefuses says why the manager would refuse a ClusterAutoscaler
// with spec, in the manager's words: convert writes only what the manager
// takes, checked by the manager's own rules.
func managerRefuses(spec caSpec) error {
	_, err := engineconfig.Settings(spec, utilclock.RealClock{})
	return err
}

func (c *conversion) warnf(format string, args ...any) {
	c.report.warnings = append(c.report.warnings, fmt.Sprintf(format, args...))
}

// applyFlags converts every flag but those that name the Cluster.
func (c *conversion) applyFlags(parsed []upstreamFlag) {
	last := map[string]int{}
	for i, f := range parsed {
		last[f.name] = i
	}
	for i, f := range parsed {
		row := flagsByName[f.name]
		switch {
		case row == nil:
			c.warnf("%s: not an upstream cluster-autoscaler flag that convert knows: left out", f.written)
		case row.identity:
		case !row.multi && last[f.name] != i:
			c.warnf("%s is given again later: upstream takes the last", f.written)
		case row.apply == nil:
			c.given[row.flag] = true
			value := f.value
			if !f.hasValue && row.boolean {
				value = "true"
			}
			if row.differs != nil {
				if warning := row.differs(c, value); warning != "" {
					c.warnf("%s: %s", f.written, warning)
					continue
				}
			}
			c.report.unmapped = append(c.report.unmapped, unmappedFlag{flag: f.written, reason: row.reason, chartDefault: c.in.chartDefaults[f.name]})
		default:
			c.applyMapped(row, f)
		}
	}
}

// applyMapped converts a flag that has a field.
func (c *conversion) applyMapped(row *flagMapping, f upstreamFlag) {
	c.given[row.flag] = true
	value := f.value
	if !f.hasValue {
		if !row.boolean {
			c.warnf("%s has no value: left out", f.written)
			return
		}
		value = "true"
	}
	before := c.spec.DeepCopy()
	shown, err := row.apply(c, value)
	var reason notMapped
	if errors.As(err, &reason) {
		c.report.unmapped = append(c.report.unmapped, unmappedFlag{flag: f.written, reason: string(reason), chartDefault: c.in.chartDefaults[f.name]})
		return
	}
	if err == nil {
		if err = managerRefuses(c.spec); err != nil {
			c.spec = *before
		}
	}
	if err != nil {
		c.warnf("%s: %v: left out%s", f.written, err, keeps(row))
		return
	}
	if other := c.setBy[row.field]; other != "" && other != row.flag && !row.multi {
		c.warnf("--%s and --%s both set %s: the later one, --%s, holds", other, row.flag, row.field, row.flag)
	}
	c.setBy[row.field] = row.flag
	c.report.mapped = append(c.report.mapped, mappedFlag{
		flag: f.written, field: row.field, value: shown, note: row.note, chartDefault: c.in.chartDefaults[f.name],
	})
}

// keeps says what a field holds when a flag could not be converted.
func keeps(row *flagMapping) string {
	if row.ours == nil {
		return ""
	}
	if ours := row.ours(autoscaler.DefaultConfig()); ours != "" {
		return fmt.Sprintf(", %s keeps our default %s", row.field, ours)
	}
	return ", " + row.field + " stays unset"
}

// finishExpanders gives the priority expander its priorities, which no
// flag holds: they come from the Helm values or the priority ConfigMap.
func (c *conversion) finishExpanders() {
	if !slices.Contains(c.spec.Expanders, autoscalingv1alpha1.PriorityExpander) {
		if len(c.in.priorities) > 0 {
			c.warnf("the expander priorities of %s are left out: --expander does not name the priority expander", c.in.prioritiesSource)
		}
		return
	}
	if len(c.in.priorities) == 0 {
		c.spec.Expanders = slices.DeleteFunc(c.spec.Expanders, func(e autoscalingv1alpha1.Expander) bool {
			return e == autoscalingv1alpha1.PriorityExpander
		})
		c.warnf("the priority expander is left out: upstream reads its priorities from the ConfigMap cluster-autoscaler-priority-expander, " +
			"which no flag holds. Give that ConfigMap with --from-priority-config FILE, or write spec.expanderPriorities " +
			"(node group IDs such as MachineDeployment/<namespace>/<name>, as upstream's clusterapi provider names them) and add priority to spec.expanders")
		c.remap("spec.expanders", joinExpanders(c.spec.Expanders))
		if len(c.spec.Expanders) == 0 {
			c.spec.Expanders = nil
		}
		return
	}
	c.spec.ExpanderPriorities = c.in.priorities
	c.report.mapped = append(c.report.mapped, mappedFlag{
		flag: "the priorities of " + c.in.prioritiesSource, field: "spec.expanderPriorities", value: describePriorities(c.in.priorities),
	})
}

// remap changes the value the report shows for field.
func (c *conversion) remap(field, value string) {
	for i := range c.report.mapped {
		if c.report.mapped[i].field == field {
			c.report.mapped[i].value = value
			if value == "" {
				c.report.mapped[i].value = "none: the default holds"
			}
		}
	}
}

func describePriorities(priorities []autoscalingv1alpha1.ExpanderPriority) string {
	parts := make([]string, 0, len(priorities))
	for _, p := range priorities {
		parts = append(parts, fmt.Sprintf("%d: %s", p.Priority, strings.Join(p.NodeGroupIDPatterns, " ")))
	}
	return strings.Join(parts, "; ")
}

// checkBackoff keeps the CRD's rule that the initial backoff does not
// exceed the maximum.
func (c *conversion) checkBackoff() {
	b := c.spec.Backoff
	if b == nil || b.Initial == nil || b.Max == nil || b.Initial.Duration <= b.Max.Duration {
		return
	}
	c.warnf("the initial backoff %s exceeds the maximum %s, which spec.backoff does not allow: spec.backoff.initial is left out", b.Initial.Duration, b.Max.Duration)
	b.Initial = nil
}

// warnOfUpstreamDefaults warns of the flags without a field, not given,
// whose upstream default asks for what capi-autoscaler does the opposite
// of: leaving such a flag out of upstream's command line asks for it too.
func (c *conversion) warnOfUpstreamDefaults() {
	for i := range flagTable {
		row := &flagTable[i]
		if row.differs == nil || c.given[row.flag] || row.upstream.value == "" {
			continue
		}
		upstream := row.upstream.at(c.minor)
		if warning := row.differs(c, upstream); warning != "" {
			c.warnf("--%s is not given, and upstream's default is %s: %s", row.flag, upstream, warning)
		}
	}
}

// compareDefaults lists the upstream defaults, of flags not given, that
// differ from ours.
func (c *conversion) compareDefaults() {
	ours := autoscaler.DefaultConfig()
	reported := map[string]bool{}
	for i := range flagTable {
		row := &flagTable[i]
		if row.ours == nil || row.equal == nil || c.given[row.flag] || c.setBy[row.field] != "" || reported[row.field] {
			continue
		}
		upstream, our := row.upstream.at(c.minor), row.ours(ours)
		if row.equal(upstream, our) {
			continue
		}
		reported[row.field] = true
		c.report.defaults = append(c.report.defaults, differingDefault{
			flag: row.flag, field: row.field, upstream: noneIfEmpty(upstream), ours: noneIfEmpty(our), note: row.note,
		})
	}
}

func noneIfEmpty(value string) string {
	if value == "" {
		return "none"
	}
	return value
}

// latestDefaultsChange is the newest upstream release whose defaults
// changed, of those the flag table knows.
func latestDefaultsChange() int {
	latest := 0
	for _, row := range flagTable {
		latest = max(latest, row.upstream.since)
	}
	return latest
}

var releasePattern = regexp.MustCompile(`^v?1\.(\d+)(\.\d+)?`)

// upstreamRelease is the minor release whose defaults apply: of version,
// else of the image tag, else the latest.
func upstreamRelease(version, image string) (int, string) {
	if m := releasePattern.FindStringSubmatch(version); m != nil {
		minor, _ := strconv.Atoi(m[1])
		return minor, fmt.Sprintf("1.%d (--upstream-version)", minor)
	}
	if tag := imageTag(image); tag != "" {
		if m := releasePattern.FindStringSubmatch(tag); m != nil {
			minor, _ := strconv.Atoi(m[1])
			return minor, fmt.Sprintf("1.%d (the image tag %s)", minor, tag)
		}
	}
	return math.MaxInt, fmt.Sprintf("1.%d or later (no image tag tells; --upstream-version sets it)", latestDefaultsChange())
}

// imageTag is the tag of an image reference, without its digest.
func imageTag(image string) string {
	image, _, _ = strings.Cut(image, "@")
	last := image[strings.LastIndex(image, "/")+1:]
	_, tag, _ := strings.Cut(last, ":")
	return tag
}
