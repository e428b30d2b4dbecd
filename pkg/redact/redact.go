// Package redact hides secret values where commands are shown: in the
// master's state, the CLI's status, the worker's launch-command log line and
// span attributes. The command that runs is never changed.
package redact

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
)

// DefaultPattern is Spark's default spark.redaction.regex,
// (?i)secret|password|token|access[.]?key, with '_' allowed where Spark
// allows '.' between "access" and "key", so that environment variables
// (AWS_ACCESS_KEY, which cannot hold a '.') are caught as properties are.
const DefaultPattern = `(?i)secret|password|token|access[._]?key`

// Text replaces a secret value, as Spark shows it.
const Text = "*********(redacted)"

// confPrefix is the one-argument form of a Spark property, --conf=KEY=VALUE.
const confPrefix = "--conf="

// defaultRE is DefaultPattern compiled, what a nil *Redactor uses: compiled
// on first use, not at package init, which every glint process (an executor
// on its launch path too) would pay for whether it redacts or not.
var defaultRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(DefaultPattern) })

// Redactor decides which values are secret: as Spark's Utils.redact, a
// KEY=VALUE pair whose key or value the pattern matches anywhere. A nil
// *Redactor uses DefaultPattern, so a config field of this type defaults to
// Spark's pattern. A Redactor is safe for concurrent use.
type Redactor struct {
	re *regexp.Regexp
}

// New returns a Redactor for pattern, a Go regular expression matched
// anywhere in a key or value; "" means DefaultPattern.
func New(pattern string) (*Redactor, error) {
	if pattern == "" {
		return nil, nil
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, fmt.Errorf("redaction pattern: %w", err)
	}
	return &Redactor{re: re}, nil
}

// Secret reports whether the pair key=value is hidden.
func (r *Redactor) Secret(key, value string) bool {
	re := defaultRE()
	if r != nil {
		re = r.re
	}
	return re.MatchString(key) || re.MatchString(value)
}

// Arg is arg as shown: KEY=VALUE (the property after --conf, or any other
// argument holding '=') and --conf=KEY=VALUE with VALUE replaced by Text when
// the pair is secret; any other argument unchanged.
func (r *Redactor) Arg(arg string) string {
	prefix, pair := "", arg
	if rest, ok := strings.CutPrefix(arg, confPrefix); ok {
		prefix, pair = confPrefix, rest
	}
	k, v, ok := strings.Cut(pair, "=")
	if !ok || !r.Secret(k, v) {
		return arg
	}
	return prefix + k + "=" + Text
}

// Args returns args as shown, in a new slice.
func (r *Redactor) Args(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = r.Arg(a)
	}
	return out
}

// Env returns env as shown, in a new map: each secret variable's value is Text.
func (r *Redactor) Env(env map[string]string) map[string]string {
	out := make(map[string]string, len(env))
	for k, v := range env {
		if r.Secret(k, v) {
			v = Text
		}
		out[k] = v
	}
	return out
}

// Command returns c as shown: c itself when nothing in it is secret, else a
// copy with the secret values of its arguments and environment replaced.
func (r *Redactor) Command(c *masterv1.Command) *masterv1.Command {
	if c == nil {
		return nil
	}
	args, env := r.Args(c.GetArgs()), r.Env(c.GetEnv())
	if slices.Equal(args, c.GetArgs()) && maps.Equal(env, c.GetEnv()) {
		return c
	}
	out := proto.CloneOf(c)
	out.Args, out.Env = args, env
	return out
}

// App returns d as shown: d itself when neither its command nor its
// properties hold a secret, else a copy with them redacted. d is never
// changed.
func (r *Redactor) App(d *masterv1.ApplicationDescription) *masterv1.ApplicationDescription {
	shown := description(r, d, d.GetCommand(), func(d *masterv1.ApplicationDescription, c *masterv1.Command) { d.Command = c })
	if conf := r.Env(d.GetConf()); !maps.Equal(conf, d.GetConf()) {
		if shown == d {
			shown = proto.CloneOf(d)
		}
		shown.Conf = conf
	}
	return shown
}

// Driver returns d as shown: d itself when its command holds no secret, else
// a copy with the command redacted. d is never changed.
func (r *Redactor) Driver(d *masterv1.DriverDescription) *masterv1.DriverDescription {
	return description(r, d, d.GetCommand(), func(d *masterv1.DriverDescription, c *masterv1.Command) { d.Command = c })
}

// description returns d, whose command is c, as shown: d itself when c holds
// no secret, else a copy whose command set replaces with c redacted.
func description[D proto.Message](r *Redactor, d D, c *masterv1.Command, set func(D, *masterv1.Command)) D {
	shown := r.Command(c)
	if shown == c {
		return d
	}
	out := proto.CloneOf(d)
	set(out, shown)
	return out
}
