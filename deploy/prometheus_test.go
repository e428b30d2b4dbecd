package deploy_test

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/glint-cluster/glint/internal/tooltest"
)

// promtool runs promtool args… in the repository and fails the test with its
// output if it fails.
func promtool(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(tooltest.Binary(t, "tools/go.mod", "promtool"), args...)
	cmd.Dir = tooltest.Root(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestPrometheusConfigIsValid(t *testing.T) {
	// rule_files resolve against the config's directory, as they do in the
	// container (/etc/prometheus/rules/…): check finds them from here too.
	out := promtool(t, "check", "config", "deploy/prometheus/prometheus.yml")
	if !strings.Contains(out, "1 rule files found") {
		t.Errorf("promtool check config found no rule files:\n%s", out)
	}
}

func TestAlertRulesAreValid(t *testing.T) {
	promtool(t, "check", "rules", "deploy/prometheus/rules/glint.yml")
}

func TestAlertRulesFireAndStayQuiet(t *testing.T) {
	promtool(t, "test", "rules", "deploy/prometheus/rules/glint_test.yml")
}

// Every alert the brief asks for exists, with a severity and a templated
// summary and description, and the unit tests exercise each one and the value
// of every recording rule.
func TestAlertRulesAreComplete(t *testing.T) {
	root := tooltest.Root(t)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string
				Record      string
				Expr        string
				Labels      map[string]string
				Annotations map[string]string
			}
		}
	}
	tooltest.ReadYAML(t, filepath.Join(root, "deploy/prometheus/rules/glint.yml"), &rules)
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string
				ExpAlerts []any `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
			PromQLExprTest []struct {
				Expr string
			} `yaml:"promql_expr_test"`
		}
	}
	tooltest.ReadYAML(t, filepath.Join(root, "deploy/prometheus/rules/glint_test.yml"), &tests)
	fires, quiet := map[string]bool{}, map[string]bool{}
	var exprTests []string
	for _, tc := range tests.Tests {
		for _, e := range tc.PromQLExprTest {
			exprTests = append(exprTests, e.Expr)
		}
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				// A recording rule's value is tested by a promql_expr_test.
				if !slices.ContainsFunc(exprTests, func(e string) bool { return strings.Contains(e, r.Record) }) {
					t.Errorf("glint_test.yml tests no value of recording rule %s", r.Record)
				}
				continue
			}
			alerts = append(alerts, r.Alert)
			if r.Labels["severity"] == "" {
				t.Errorf("%s has no severity label", r.Alert)
			}
			for _, a := range []string{"summary", "description"} {
				if r.Annotations[a] == "" {
					t.Errorf("%s has no %s", r.Alert, a)
				}
			}
			if !strings.Contains(r.Annotations["summary"]+r.Annotations["description"], "$labels.") {
				t.Errorf("%s's annotations name no $labels", r.Alert)
			}
			if !fires[r.Alert] || !quiet[r.Alert] {
				t.Errorf("glint_test.yml does not test %s both firing (%v) and not firing (%v)", r.Alert, fires[r.Alert], quiet[r.Alert])
			}
		}
	}
	slices.Sort(alerts)
	want := []string{"GlintApplicationFailed", "GlintAppsWaiting", "GlintExecutorLaunchSlow", "GlintExecutorStartBudgetBurnFast", "GlintExecutorStartBudgetBurnSlow",
		"GlintExecutorsFailingToStart", "GlintNoMasterLeads", "GlintWorkerHeartbeatLate", "GlintWorkerTimedOut"}
	if !slices.Equal(alerts, want) {
		t.Errorf("alerts %v, want %v", alerts, want)
	}
}
