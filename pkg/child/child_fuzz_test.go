package child

import (
	"strings"
	"testing"
)

// FuzzSubstitute: each argument is substituted on its own (as many arguments
// out as in), a template without "{{" is unchanged, and a value is inserted
// literally — never substituted again.
func FuzzSubstitute(f *testing.F) {
	f.Add("--cores={{CORES}}", "{{APP_ID}}", "4", "{{CORES}}")
	f.Add("{{EXECUTOR_ID}}{{EXECUTOR_ID}}", "", "{{", "}}")
	f.Add("plain", "{{UNKNOWN}}", "", "")
	f.Fuzz(func(t *testing.T, a, b, cores, appID string) {
		vars := map[string]string{VarCores: cores, VarAppID: appID}
		out := Substitute([]string{a, b}, vars)
		if len(out) != 2 {
			t.Fatalf("%d arguments out of 2", len(out))
		}
		for i, in := range []string{a, b} {
			if !strings.Contains(in, "{{") && out[i] != in {
				t.Fatalf("%q without placeholders became %q", in, out[i])
			}
		}
		if got := Substitute([]string{"{{" + VarCores + "}}"}, vars)[0]; got != cores {
			t.Fatalf("{{CORES}} with %q became %q", cores, got)
		}
		if got := Substitute([]string{"{{" + VarCores + "}}" + "{{" + VarAppID + "}}"}, vars)[0]; got != cores+appID {
			t.Fatalf("{{CORES}}{{APP_ID}} became %q, want %q", got, cores+appID)
		}
	})
}
