// Package monitoring holds the alerting rules and the Grafana dashboard of
// this kustomize component, for the tests that check them: here, against
// Prometheus' parser and rule loader and against recorded series; in the
// repository's root package, against the metrics a running manager serves.
package monitoring

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

var (
	//go:embed prometheusrule.yaml
	prometheusRule []byte
	//go:embed dashboard.json
	dashboard []byte
)

// RuleGroups returns the spec of the PrometheusRule: Prometheus' rule file,
// with its groups.
func RuleGroups() ([]byte, error) {
	var rule struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := yaml.Unmarshal(prometheusRule, &rule); err != nil {
		return nil, fmt.Errorf("reading prometheusrule.yaml: %w", err)
	}
	groups, err := yaml.JSONToYAML(rule.Spec)
	if err != nil {
		return nil, fmt.Errorf("reading the spec of prometheusrule.yaml: %w", err)
	}
	return groups, nil
}

// Query is a PromQL expression of the rules or of the dashboard.
type Query struct {
	// Where says which rule, panel or variable it is.
	Where string
	// Expr is the expression, with the dashboard's variables replaced by
	// sample values (DashboardVariables).
	Expr string
	// Labels are labels the query reads that Expr does not name: the label
	// whose values a dashboard variable lists.
	Labels []string
}

// DashboardVariables are sample values of the variables the dashboard's
// queries use, as Grafana replaces them: every cluster and node group, and
// a rate interval.
var DashboardVariables = map[string]string{
	"$__rate_interval": "1m",
	"$cluster":         ".*",
	"$node_group":      ".*",
}

// Queries returns every PromQL expression of the alerting rules and of the
// dashboard: its panels' targets and its query variables.
func Queries() ([]Query, error) {
	alerts, err := alertQueries()
	if err != nil {
		return nil, err
	}
	panels, err := dashboardQueries()
	if err != nil {
		return nil, err
	}
	return append(alerts, panels...), nil
}

func alertQueries() ([]Query, error) {
	groups, err := RuleGroups()
	if err != nil {
		return nil, err
	}
	var file struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(groups, &file); err != nil {
		return nil, fmt.Errorf("reading the rule groups of prometheusrule.yaml: %w", err)
	}
	var queries []Query
	for _, group := range file.Groups {
		for _, rule := range group.Rules {
			queries = append(queries, Query{Where: "alert " + rule.Alert, Expr: rule.Expr})
		}
	}
	return queries, nil
}

// panel is what the tests read of a Grafana panel; a row's panels are
// nested when it is collapsed.
type panel struct {
	Title   string `json:"title"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

// labelValues is a variable's query label_values(selector, label).
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)

func dashboardQueries() ([]Query, error) {
	var board struct {
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name string `json:"name"`
				Type string `json:"type"`
				// An object for query variables, the data source type's
				// name for data source variables.
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(dashboard, &board); err != nil {
		return nil, fmt.Errorf("reading dashboard.json: %w", err)
	}
	var queries []Query
	for _, variable := range board.Templating.List {
		if variable.Type != "query" {
			continue
		}
		var query struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(variable.Query, &query); err != nil {
			return nil, fmt.Errorf("dashboard.json: variable %s: %w", variable.Name, err)
		}
		match := labelValues.FindStringSubmatch(query.Query)
		if match == nil {
			return nil, fmt.Errorf("dashboard.json: variable %s: %q is not label_values(selector, label)", variable.Name, query.Query)
		}
		expr, err := substitute(match[1])
		if err != nil {
			return nil, fmt.Errorf("dashboard.json: variable %s: %w", variable.Name, err)
		}
		queries = append(queries, Query{Where: "variable " + variable.Name, Expr: expr, Labels: []string{match[2]}})
	}
	var walk func(panels []panel) error
	walk = func(panels []panel) error {
		for _, p := range panels {
			for _, target := range p.Targets {
				expr, err := substitute(target.Expr)
				if err != nil {
					return fmt.Errorf("dashboard.json: panel %q, target %s: %w", p.Title, target.RefID, err)
				}
				queries = append(queries, Query{Where: fmt.Sprintf("panel %q, target %s", p.Title, target.RefID), Expr: expr})
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(board.Panels); err != nil {
		return nil, err
	}
	return queries, nil
}

// substitute replaces the dashboard's variables in expr, and fails on one
// it does not know.
func substitute(expr string) (string, error) {
	for name, value := range DashboardVariables {
		expr = strings.ReplaceAll(expr, name, value)
	}
	if strings.Contains(expr, "$") {
		return "", fmt.Errorf("%q uses a variable without a sample value", expr)
	}
	return expr, nil
}
