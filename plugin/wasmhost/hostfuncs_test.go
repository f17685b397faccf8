package wasmhost

import "testing"

// A local reply's details are kept as Envoy keeps them: every white space
// byte StringUtil::replaceAllEmptySpace knows becomes '_', nothing else
// changes.
func TestLocalReplyDetailsHaveWhiteSpaceReplacedAsEnvoyDoes(t *testing.T) {
	for in, want := range map[string]string{
		"":                              "",
		"sluice_rate_limited{per-key}":  "sluice_rate_limited{per-key}",
		"a b\tc\fd\ve\nf\rg":            "a_b_c_d_e_f_g",
		"  two\u00a0spaces (non-ASCII)": "__two\u00a0spaces_(non-ASCII)",
	} {
		if got := replaceEmptySpace([]byte(in)); got != want {
			t.Errorf("replaceEmptySpace(%q) = %q, want %q", in, got, want)
		}
	}
}
