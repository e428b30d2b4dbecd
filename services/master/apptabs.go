package master

import (
	"slices"
	"strings"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
)

// appTabs are the tabs of an application's page, the first shown by default.
var appTabs = []string{"executors", "environment"}

// appTab is the tab a page request asks for (?tab=), executors unless it
// names another.
func appTab(q string) string {
	if slices.Contains(appTabs, q) {
		return q
	}
	return appTabs[0]
}

// setting is one named value of an application's environment.
type setting struct{ Name, Value string }

// environment is what an application's Environment tab shows of d, whose
// command the master has already redacted.
type environment struct {
	// Conf is each --conf of its command, in order.
	Conf []setting
	// Args is its whole command; Env its environment, sorted by name.
	Args []string
	Env  []setting
	// ModifyACLs is spark.modify.acls.
	ModifyACLs []string
}

func appEnvironment(d *masterv1.ApplicationDescription) environment {
	c := d.GetCommand()
	env := environment{Args: c.GetArgs(), ModifyACLs: d.GetModifyAcls()}
	args := c.GetArgs()
	for i := 0; i < len(args); i++ {
		kv, ok := strings.CutPrefix(args[i], "--conf=")
		if !ok && args[i] == "--conf" && i+1 < len(args) {
			i++
			kv, ok = args[i], true
		}
		if ok {
			k, v, _ := strings.Cut(kv, "=")
			env.Conf = append(env.Conf, setting{k, v})
		}
	}
	for k, v := range c.GetEnv() {
		env.Env = append(env.Env, setting{k, v})
	}
	slices.SortFunc(env.Env, func(a, b setting) int { return strings.Compare(a.Name, b.Name) })
	return env
}
