package policy

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

const secretDoc = `{
  "mode": "enforce",
  "telemetry": {"cluster": "sluice_admin", "token" : "sluice_tel_s3cret\u0021", "top_n": 5},
  ` + telemetryRules + `
}`

func TestMaskSecretsKeepsEverythingElse(t *testing.T) {
	out := MaskSecrets([]byte(secretDoc))
	if strings.Contains(string(out), "s3cret") {
		t.Fatalf("token still there:\n%s", out)
	}
	want := strings.Replace(secretDoc, `"sluice_tel_s3cret\u0021"`, `"`+SecretMask+`"`, 1)
	if string(out) != want {
		t.Fatalf("masked:\n%s\nwant:\n%s", out, want)
	}
	cfg, err := Parse(out)
	if err != nil || cfg.Telemetry.Token != SecretMask {
		t.Fatalf("masked doc: %v %+v", err, cfg)
	}
	if !HasMaskedSecret(out) || HasMaskedSecret([]byte(secretDoc)) {
		t.Fatal("HasMaskedSecret")
	}
}

func TestMaskSecretsLeavesOtherDocumentsAlone(t *testing.T) {
	for _, doc := range []string{
		`{"telemetry": {"cluster": "c", "token_env": "T"}, "rules": []}`,
		`{"rules": [{"name": "token", "telemetry": {"token": "x"}}]}`, // not the top-level telemetry
		`{"telemetry": {"cluster": "c", "token": 5}}`,
		`["telemetry", {"token": "x"}]`,
		`not json`,
		``,
	} {
		if out := MaskSecrets([]byte(doc)); string(out) != doc {
			t.Errorf("%s: masked to %s", doc, out)
		}
	}
}

func TestMaskSecretsEveryDuplicate(t *testing.T) {
	doc := `{"telemetry": {"token": "aaaaaaaaa", "token": "bbbbbbbbb"}, "telemetry": {"token": "ccccccccc"}}`
	out := string(MaskSecrets([]byte(doc)))
	if strings.ContainsAny(out, "abc") {
		t.Fatalf("masked: %s", out)
	}
}

func TestRestoreSecrets(t *testing.T) {
	stored := []byte(`{"telemetry":{"cluster":"c","token":"the-real-token"}}`)
	edited := MaskSecrets([]byte(secretDoc))
	out, err := RestoreSecrets(edited, stored)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse(out)
	if err != nil || cfg.Telemetry.Token != "the-real-token" || cfg.Telemetry.TopN != 5 {
		t.Fatalf("restored: %v %+v\n%s", err, cfg, out)
	}
	// A new token typed in is kept as typed.
	if out, err := RestoreSecrets([]byte(secretDoc), stored); err != nil || string(out) != secretDoc {
		t.Fatalf("unmasked doc changed: %v\n%s", err, out)
	}
	// Nothing to restore from: an error at the field's path.
	_, err = RestoreSecrets(edited, []byte(`{"telemetry":{"cluster":"c","token_env":"T"}}`))
	var es Errors
	if !errors.As(err, &es) || es[0].Path != "telemetry.token" {
		t.Fatalf("err %v", err)
	}
}

// FuzzMaskSecrets: never panics; on a valid configuration the masked
// document parses to the same configuration with the mask for a token, and
// restoring from the original gives the original configuration back.
func FuzzMaskSecrets(f *testing.F) {
	f.Add(secretDoc)
	f.Add(`{"telemetry":{"cluster":"c","token":"x"},"rules":[{"name":"r","limit_keys":["path"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}]}`)
	f.Add(`{"telemetry": {"token": "a", "token": "b"}}`)
	f.Add(`{"telemetry": [{"token": "a"}]}`)
	f.Add(`{"a": {"telemetry": {"token": "x"}}, "telemetry": {"x": [1, {"token": "y"}], "token": "z"}}`)
	f.Fuzz(func(t *testing.T, doc string) {
		out := MaskSecrets([]byte(doc))
		cfg, err := Parse([]byte(doc))
		if err != nil || cfg.Telemetry == nil || cfg.Telemetry.Token == "" {
			return
		}
		masked, err := Parse(out)
		if err != nil {
			t.Fatalf("masked doc does not parse: %v\n%s", err, out)
		}
		if masked.Telemetry.Token != SecretMask {
			t.Fatalf("token %q after masking", masked.Telemetry.Token)
		}
		masked.Telemetry.Token = cfg.Telemetry.Token
		a, _ := json.Marshal(cfg)
		b, _ := json.Marshal(masked)
		if string(a) != string(b) {
			t.Fatalf("masking changed more than the token:\n%s\n%s", a, b)
		}
		if cfg.Telemetry.Token == SecretMask {
			return
		}
		back, err := RestoreSecrets(out, []byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		restored, err := Parse(back)
		if err != nil {
			t.Fatal(err)
		}
		if c, _ := json.Marshal(restored); string(c) != string(a) {
			t.Fatalf("restore:\n%s\n%s", a, c)
		}
	})
}
