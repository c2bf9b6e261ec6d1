package compare

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
)

// What the other cluster autoscaler of a workload cluster leaves there, and
// how compare reads it. The other autoscaler is the upstream
// cluster-autoscaler (--cloud-provider=clusterapi), or capi-autoscaler in
// Active mode, which records the same events.
//
// The upstream autoscaler records, with the source component
// cluster-autoscaler:
//   - on each pod a scale-up was for, TriggeredScaleUp "pod triggered
//     scale-up: [{MachineDeployment/default/md-0 1->3 (max: 5)} ...]", one
//     {group current->new (max: max)} per node group it grew;
//   - on each node it removes, ScaleDown "marked the node as
//     toBeDeleted/unschedulable" (and ScaleDown "deleting pod for node
//     scale down" on the pods it evicts);
//   - on its status ConfigMap, ScaleDown "Scale-down: removing node N,
//     utilization: ..." and "Scale-down: node N removed with drain", and
//     ScaleDownEmpty "Scale-down: removing empty node "N"" (N unquoted in
//     older versions) and "Scale-down: empty node N removed". Versions
//     before the node's ScaleDown event covered empty nodes tell of those
//     only here.

const (
	// otherAutoscalerComponent is the source component of the upstream
	// autoscaler's events, which capi-autoscaler's also have.
	otherAutoscalerComponent = "cluster-autoscaler"
	// reasonScaleDownEmpty is the reason of the upstream autoscaler's
	// events on removing an empty node.
	reasonScaleDownEmpty = "ScaleDownEmpty"
	// triggeredScaleUpPrefix starts the message of a TriggeredScaleUp event.
	triggeredScaleUpPrefix = autoscaler.TriggeredScaleUpPrefix
)

// GroupChange is a node group a scale-up grows: by how many nodes, and,
// from the other autoscaler's message, from which size to which, and its
// max size.
type GroupChange struct {
	ID    string `json:"id"`
	Delta int32  `json:"delta"`
	From  *int32 `json:"from,omitempty"`
	To    *int32 `json:"to,omitempty"`
	Max   *int32 `json:"max,omitempty"`
}

// scaleUpGroup is one {ID current->new (max: max)} of a TriggeredScaleUp
// message; spaces around its parts and the max are optional.
var scaleUpGroup = regexp.MustCompile(`^\s*(\S+)\s+(-?\d+)\s*->\s*(-?\d+)\s*(?:\(\s*max:\s*(-?\d+)\s*\))?\s*$`)

// parseScaleUpMessage reads the node groups of a TriggeredScaleUp message.
// It reads what it can: the groups it understood come with an error that
// names what it did not.
func parseScaleUpMessage(message string) ([]GroupChange, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(message), triggeredScaleUpPrefix)
	if !ok {
		return nil, fmt.Errorf("does not start with %q", triggeredScaleUpPrefix)
	}
	rest = strings.TrimSpace(rest)
	rest = strings.TrimSuffix(strings.TrimPrefix(rest, "["), "]")
	var groups []GroupChange
	var problems []string
	for rest = strings.TrimSpace(rest); rest != ""; rest = strings.TrimSpace(rest) {
		open := strings.IndexByte(rest, '{')
		if open != 0 {
			end := len(rest)
			if open > 0 {
				end = open
			}
			problems = append(problems, fmt.Sprintf("%q is no {group current->new (max: max)}", rest[:end]))
			rest = rest[end:]
			continue
		}
		closing := strings.IndexByte(rest, '}')
		if closing < 0 {
			problems = append(problems, fmt.Sprintf("%q is not closed", rest))
			break
		}
		part := rest[1:closing]
		rest = rest[closing+1:]
		m := scaleUpGroup.FindStringSubmatch(part)
		if m == nil {
			problems = append(problems, fmt.Sprintf("%q is no {group current->new (max: max)}", "{"+part+"}"))
			continue
		}
		from, errFrom := strconv.ParseInt(m[2], 10, 32)
		to, errTo := strconv.ParseInt(m[3], 10, 32)
		if errFrom != nil || errTo != nil {
			problems = append(problems, fmt.Sprintf("%q has sizes out of range", "{"+part+"}"))
			continue
		}
		group := GroupChange{ID: m[1], Delta: int32(to - from), From: ptr.To(int32(from)), To: ptr.To(int32(to))}
		if m[4] != "" {
			if maxSize, err := strconv.ParseInt(m[4], 10, 32); err == nil {
				group.Max = ptr.To(int32(maxSize))
			}
		}
		groups = append(groups, group)
	}
	if len(groups) == 0 && len(problems) == 0 {
		problems = append(problems, "names no node group")
	}
	if len(problems) > 0 {
		return groups, errors.New(strings.Join(problems, "; "))
	}
	return groups, nil
}

// statusScaleDownMessages are the messages of the upstream autoscaler's
// scale-down events on its status ConfigMap; the first group is the node.
var statusScaleDownMessages = []*regexp.Regexp{
	regexp.MustCompile(`^Scale-down: removing (?:empty )?node "?([^",\s]+)"?`),
	regexp.MustCompile(`^Scale-down: (?:empty )?node "?([^",\s]+)"? removed`),
}

// errNotAboutANode: a scale-down event that removes no node, such as the
// one on an evicted pod.
var errNotAboutANode = errors.New("not about a node")

// scaleDownNode is the node a ScaleDown or ScaleDownEmpty event of the
// other autoscaler removes: the node the event is about, or the one its
// status ConfigMap's event names. The error is errNotAboutANode for events
// on other objects, and says what was not understood of a ConfigMap's event.
func scaleDownNode(e *corev1.Event) (string, error) {
	if e.Reason != scaledown.EventReasonScaleDown && e.Reason != reasonScaleDownEmpty {
		return "", errNotAboutANode
	}
	switch e.InvolvedObject.Kind {
	case "Node":
		if e.InvolvedObject.Name == "" {
			return "", errors.New("the event names no node")
		}
		return e.InvolvedObject.Name, nil
	case "ConfigMap":
		message := strings.TrimSpace(e.Message)
		for _, pattern := range statusScaleDownMessages {
			if m := pattern.FindStringSubmatch(message); m != nil {
				return m[1], nil
			}
		}
		return "", fmt.Errorf("%s event %q names no node", e.Reason, e.Message)
	}
	return "", errNotAboutANode
}

// fromOtherAutoscaler says whether an event was recorded by a cluster
// autoscaler: events that name their source must name cluster-autoscaler.
func fromOtherAutoscaler(e *corev1.Event) bool {
	switch {
	case e.Source.Component != "":
		return e.Source.Component == otherAutoscalerComponent
	case e.ReportingController != "":
		return e.ReportingController == otherAutoscalerComponent
	}
	return true
}

// firstOccurrence is when an event first happened, whichever API recorded it.
func firstOccurrence(e *corev1.Event) time.Time {
	switch {
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

// TheirStatus is what the other autoscaler's status ConfigMap says: when
// it wrote it, and the health and activity of the cluster and of each node
// group.
type TheirStatus struct {
	// ConfigMap is namespace/name.
	ConfigMap   string       `json:"configMap"`
	LastUpdated *metav1.Time `json:"lastUpdated,omitempty"`
	// Format is yaml (cluster-autoscaler 1.30 and later), text (before)
	// or unknown.
	Format           string            `json:"format"`
	AutoscalerStatus string            `json:"autoscalerStatus,omitempty"`
	ClusterHealth    string            `json:"clusterHealth,omitempty"`
	ScaleUp          string            `json:"scaleUp,omitempty"`
	ScaleDown        string            `json:"scaleDown,omitempty"`
	NodeGroups       []TheirGroupState `json:"nodeGroups,omitempty"`
	// Problem says what could not be read.
	Problem string `json:"problem,omitempty"`
}

// TheirGroupState is a node group in the other autoscaler's status.
type TheirGroupState struct {
	ID         string `json:"id"`
	Health     string `json:"health,omitempty"`
	Target     *int32 `json:"target,omitempty"`
	MinSize    *int32 `json:"minSize,omitempty"`
	MaxSize    *int32 `json:"maxSize,omitempty"`
	ScaleUp    string `json:"scaleUp,omitempty"`
	ScaleDown  string `json:"scaleDown,omitempty"`
	Candidates *int32 `json:"candidates,omitempty"`
}

// parseTheirStatus reads the other autoscaler's status ConfigMap.
func parseTheirStatus(configMap *corev1.ConfigMap) *TheirStatus {
	status := &TheirStatus{ConfigMap: configMap.Namespace + "/" + configMap.Name, Format: "unknown"}
	if written, ok := autoscaler.UpstreamStatusLastUpdated(configMap); ok {
		status.LastUpdated = &metav1.Time{Time: written}
	}
	data, ok := configMap.Data[autoscaler.UpstreamStatusDataKey]
	switch {
	case !ok:
		status.Problem = fmt.Sprintf("no key %q", autoscaler.UpstreamStatusDataKey)
	case strings.HasPrefix(strings.TrimSpace(data), "Cluster-autoscaler status at") || strings.Contains(data, "\nCluster-wide:"):
		status.Format = "text"
		parseTextStatus(data, status)
	default:
		if err := parseYAMLStatus(data, status); err != nil {
			status.Problem = err.Error()
		} else {
			status.Format = "yaml"
		}
	}
	return status
}

// upstreamStatus is the part of the upstream autoscaler's YAML status that
// compare shows.
type upstreamStatus struct {
	AutoscalerStatus string `json:"autoscalerStatus"`
	ClusterWide      struct {
		Health    struct{ Status string } `json:"health"`
		ScaleUp   struct{ Status string } `json:"scaleUp"`
		ScaleDown struct{ Status string } `json:"scaleDown"`
	} `json:"clusterWide"`
	NodeGroups []struct {
		Name   string `json:"name"`
		Health struct {
			Status              string `json:"status"`
			CloudProviderTarget *int32 `json:"cloudProviderTarget"`
			MinSize             *int32 `json:"minSize"`
			MaxSize             *int32 `json:"maxSize"`
		} `json:"health"`
		ScaleUp   struct{ Status string } `json:"scaleUp"`
		ScaleDown struct {
			Status     string `json:"status"`
			Candidates *int32 `json:"candidates"`
		} `json:"scaleDown"`
	} `json:"nodeGroups"`
}

func parseYAMLStatus(data string, status *TheirStatus) error {
	var parsed upstreamStatus
	if err := yaml.Unmarshal([]byte(data), &parsed); err != nil {
		return fmt.Errorf("the status is neither text nor YAML: %w", err)
	}
	if parsed.AutoscalerStatus == "" && parsed.ClusterWide.Health.Status == "" && len(parsed.NodeGroups) == 0 {
		return errors.New("the status says nothing compare understands")
	}
	status.AutoscalerStatus = parsed.AutoscalerStatus
	status.ClusterHealth = parsed.ClusterWide.Health.Status
	status.ScaleUp = parsed.ClusterWide.ScaleUp.Status
	status.ScaleDown = parsed.ClusterWide.ScaleDown.Status
	for _, g := range parsed.NodeGroups {
		status.NodeGroups = append(status.NodeGroups, TheirGroupState{
			ID: g.Name, Health: g.Health.Status, Target: g.Health.CloudProviderTarget,
			MinSize: g.Health.MinSize, MaxSize: g.Health.MaxSize,
			ScaleUp: g.ScaleUp.Status, ScaleDown: g.ScaleDown.Status, Candidates: g.ScaleDown.Candidates,
		})
	}
	return nil
}

// textCondition is a line such as "  Health:      Healthy (ready=2 ...)" of
// the text status of upstream versions before 1.30.
var textCondition = regexp.MustCompile(`^\s*(Name|Health|ScaleUp|ScaleDown):\s*(\S*)\s*(?:\((.*)\))?\s*$`)

// textNumbers find key=number in a condition's message.
var textNumbers = map[string]*regexp.Regexp{}

func init() {
	for _, key := range []string{"cloudProviderTarget", "minSize", "maxSize", "candidates"} {
		textNumbers[key] = regexp.MustCompile(`\b` + key + `=(\d+)`)
	}
}

// textNumber is the number of key=number in a condition's message.
func textNumber(message, key string) *int32 {
	m := textNumbers[key].FindStringSubmatch(message)
	if m == nil {
		return nil
	}
	n, err := strconv.ParseInt(m[1], 10, 32)
	if err != nil {
		return nil
	}
	return ptr.To(int32(n))
}

// parseTextStatus reads the text status: the cluster-wide conditions, then
// one block per node group, which Name starts (versions without it start
// a group with its Health).
func parseTextStatus(data string, status *TheirStatus) {
	inGroups := false
	var group *TheirGroupState
	for _, line := range strings.Split(data, "\n") {
		if strings.TrimSpace(line) == "NodeGroups:" {
			inGroups = true
			continue
		}
		m := textCondition.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		key, value, message := m[1], m[2], m[3]
		if !inGroups {
			switch key {
			case "Health":
				status.ClusterHealth = value
			case "ScaleUp":
				status.ScaleUp = value
			case "ScaleDown":
				status.ScaleDown = value
			}
			continue
		}
		if key == "Name" || group == nil || (key == "Health" && group.Health != "") {
			status.NodeGroups = append(status.NodeGroups, TheirGroupState{})
			group = &status.NodeGroups[len(status.NodeGroups)-1]
		}
		switch key {
		case "Name":
			group.ID = value
		case "Health":
			group.Health = value
			group.Target = textNumber(message, "cloudProviderTarget")
			group.MinSize = textNumber(message, "minSize")
			group.MaxSize = textNumber(message, "maxSize")
		case "ScaleUp":
			group.ScaleUp = value
		case "ScaleDown":
			group.ScaleDown = value
			group.Candidates = textNumber(message, "candidates")
		}
	}
	if status.ClusterHealth == "" && len(status.NodeGroups) == 0 {
		status.Problem = "the text status says nothing compare understands"
	}
}
