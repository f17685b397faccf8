package policy

import (
	"strings"
	"testing"
)

func TestMaxDelayMS(t *testing.T) {
	checkTokenBucketInt(t, "rules[0].algorithm_config.max_delay_ms", func(tb *TokenBucket) int { return tb.MaxDelayMS }, []intCase{
		{`{"rps":5,"burst":10}`, 0, ""},
		{`{"rps":5,"burst":10,"max_delay_ms":0}`, 0, ""},
		{`{"rps":5,"burst":10,"max_delay_ms":250}`, 250, ""},
		{`{"rps":5,"burst":10,"max_delay_ms":60000}`, 60000, ""},
		{`{"rps":5,"burst":10,"max_delay_ms":60001}`, 0, "out of range"},
		{`{"rps":5,"burst":10,"max_delay_ms":-1}`, 0, "out of range"},
		{`{"rps":5,"burst":10,"max_delay_ms":1.5}`, 0, "not an integer"},
		{`{"rps":5,"burst":10,"max_delay_ms":"100"}`, 0, "must be an integer"},
		{`{"rps":5,"burst":10,"max_delay_ms":null}`, 0, "must be an integer"},
		{`{"rps":5,"burst":10,"max_delay_ms":1e400}`, 0, "not an integer"},
	})
}

// intCase is a token_bucket algorithm_config and the integer field it
// gives, or a substring of the one error it gets at the field's path.
type intCase struct {
	in   string
	want int
	err  string // "" = valid
}

// checkTokenBucketInt parses each case's rule and checks the field get
// reads, or the error at path.
func checkTokenBucketInt(t *testing.T, path string, get func(*TokenBucket) int, cases []intCase) {
	t.Helper()
	for _, c := range cases {
		cfg, err := Parse([]byte(withTB(c.in)))
		if c.err == "" {
			if err != nil {
				t.Errorf("%s: %v", c.in, err)
				continue
			}
			if got := get(cfg.Policies[0].Rules[0].TokenBucket); got != c.want {
				t.Errorf("%s: %d, want %d", c.in, got, c.want)
			}
			continue
		}
		es, ok := err.(Errors)
		if !ok || len(es) != 1 || es[0].Path != path || !strings.Contains(es[0].Message, c.err) {
			t.Errorf("%s: got %v, want one error at %s containing %q", c.in, err, path, c.err)
		}
	}
}

// A delay changes the normalized form (so the configuration hash); no
// delay leaves it as it was before the field existed.
func TestMaxDelayNormalized(t *testing.T) {
	plain, err := Parse([]byte(withTB(`{"rps":5,"burst":10}`)))
	if err != nil {
		t.Fatal(err)
	}
	delayed, err := Parse([]byte(withTB(`{"rps":5,"burst":10,"max_delay_ms":500}`)))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := plain.MarshalJSON()
	b, _ := delayed.MarshalJSON()
	if strings.Contains(string(a), "max_delay_ms") || !strings.Contains(string(b), `"max_delay_ms":500`) {
		t.Fatalf("normalized:\n%s\n%s", a, b)
	}
	again, err := Parse(b)
	if err != nil || again.Policies[0].Rules[0].TokenBucket.MaxDelayMS != 500 {
		t.Fatalf("round trip: %v", err)
	}
}
