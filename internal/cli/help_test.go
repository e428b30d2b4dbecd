package cli

import (
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/glint-cluster/glint/pkg/app"
)

// A back-quoted word in a flag's usage becomes its value name in --help:
// every flag's value name is one word, never a phrase such as "glint token".
func TestEveryFlagsValueNameIsOneWord(t *testing.T) {
	var check func(*cobra.Command)
	check = func(c *cobra.Command) {
		visit := func(f *pflag.Flag) {
			if name, _ := pflag.UnquoteUsage(f); strings.ContainsAny(name, " \t") {
				t.Errorf("glint %s --%s shows the value name %q", c.Name(), f.Name, name)
			}
		}
		c.PersistentFlags().VisitAll(visit)
		c.Flags().VisitAll(visit)
		for _, sub := range c.Commands() {
			check(sub)
		}
	}
	apps, err := app.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	check(newRoot(apps, nil, io.Discard, io.Discard))
}
