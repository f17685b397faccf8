package scenario

// block_seconds: once a token-bucket rule refuses an identity, the
// identity stays refused for that long whatever it sends (a lockout after
// too many failed logins, a scraper kept out for a while), and the
// refusal's Retry-After says when it may come back. Requests during the
// block do not lengthen it; other identities are not touched.

import (
	"strings"
	"testing"
	"time"

	telfmt "github.com/sluice-rl/sluice/shared/telemetry"
)

func init() {
	register(Case{Name: "BlockSecondsKeepsARefusedIdentityOut", Run: blockSeconds})
}

const blockConfig = `{"policies": [{"name": "logins", "rules": [
  {"name": "login", "limit_keys": ["header:x-user"], "algorithm": "token_bucket",
   "algorithm_config": {"rps": 1, "burst": 3, "block_seconds": 60}}]}]}`

func blockSeconds(t *testing.T, start Starter) {
	h := mustStart(t, start, Options{Config: []byte(blockConfig), Start: noon})
	alice := req("x-user", "alice")
	if got := admitted(t, h, 3, alice); got != 3 {
		t.Fatalf("alice's burst: %d of 3 admitted", got)
	}
	res := do(t, h, alice)
	wantRejection(t, "alice's fourth", res, 429, `{"error":"rate_limited","rule":"login"...`)
	// The block, then a second for a token (Retry-After adds a jitter of
	// its own to a token bucket's wait).
	if ra := atoi(t, "retry-after", header(res.ResponseHeaders, "retry-after")); ra < 61 || ra > 120 {
		t.Errorf("alice's fourth: Retry-After %d, want the block's 61 s (with jitter, at most 120)", ra)
	}
	// Without the block she would get a token a second; blocked, she
	// gets none for a minute, and trying does not lengthen it.
	for i := range 6 {
		h.Advance(10 * time.Second)
		if i < 5 {
			if res := do(t, h, alice); !res.Rejected {
				t.Fatalf("%d s into the block: admitted", 10*(i+1))
			}
		}
	}
	// 60 s: the bucket is back to empty; one more second gives a token.
	h.Advance(time.Second)
	wantAdmitted(t, h, "alice, 61 s after the block began", alice)
	// Bob was never refused: his bucket is his own.
	if got := admitted(t, h, 3, req("x-user", "bob")); got != 3 {
		t.Errorf("bob: %d of 3 admitted", got)
	}
	// Dave comes back before his bucket holds a token again: refused by
	// an empty bucket, as any, he starts a new block.
	dave := req("x-user", "dave")
	admitted(t, h, 4, dave)
	h.Advance(60500 * time.Millisecond)
	if res := do(t, h, dave); !res.Rejected {
		t.Fatal("dave, 60.5 s after his block began: admitted before his bucket held a token")
	}
	h.Advance(time.Second)
	if res := do(t, h, dave); !res.Rejected {
		t.Fatal("dave, 61.5 s after his first block began: admitted, but his early request blocked him again")
	}
	h.Advance(60 * time.Second)
	wantAdmitted(t, h, "dave, 61 s after his second block began", dave)
	if n := metric(h, "sluice.rule.login.blocked"); n != 3 {
		t.Errorf("sluice.rule.login.blocked = %d, want 3 (alice, dave twice)", n)
	}
	noRecoveredPanics(t, h)
}

func init() {
	register(Case{Name: "BlockSecondsLocksOutAfterFailedLogins", Run: blockFailedLogins})
}

// Three failed logins a user may make, one more a minute; the attempt
// refused after them locks the user out for 15 minutes, after which the
// bucket refills from empty (a minute more for the next attempt). A shadow
// copy of the rule marks what it would refuse, blocks included.
const lockoutConfig = `{"policies": [
  {"name": "logins", "rules": [
    {"name": "failed-logins", "match": {"path": "/login"}, "limit_keys": ["header:x-user"], "algorithm": "token_bucket",
     "algorithm_config": {"rps": 0.0166667, "burst": 3, "cost_source": "response_status:401", "block_seconds": 900}}]},
  {"name": "trial", "rules": [
    {"name": "trial-failed-logins", "mode": "shadow", "match": {"path": "/login"}, "limit_keys": ["header:x-user"], "algorithm": "token_bucket",
     "algorithm_config": {"rps": 0.0166667, "burst": 2, "cost_source": "response_status:401", "block_seconds": 900}}]}]}`

func blockFailedLogins(t *testing.T, start Starter) {
	h := mustStart(t, start, Options{Config: []byte(`{"telemetry": {"cluster": "sluice_admin", "token": "t", "interval_ms": 1000}, ` + lockoutConfig[1:]),
		Start: noon, Clusters: []string{"sluice_admin"}})
	failed := req(":path", "/login", ":method", "POST", "x-user", "carol")
	failed.ResponseHeaders = []Header{{":status", "401"}}
	marked := func(r Response) bool {
		return strings.Contains(header(r.UpstreamHeaders, "x-sluice-shadow"), "trial-failed-logins")
	}
	for i := range 3 {
		res := do(t, h, failed)
		if res.Rejected {
			t.Fatalf("failed login %d: refused", i+1)
		}
		if got, want := marked(res), i == 2; got != want {
			t.Errorf("failed login %d: marked by the shadow rule %v, want %v", i+1, got, want)
		}
	}
	res := do(t, h, failed)
	wantRejection(t, "the fourth attempt", res, 429, `{"error":"rate_limited","rule":"failed-logins"...`)
	if ra := atoi(t, "retry-after", header(res.ResponseHeaders, "retry-after")); ra < 900 {
		t.Errorf("the fourth attempt: Retry-After %d, want the 900 s lockout", ra)
	}
	// A minute would give a failed login back; the lockout holds 15, and
	// a minute more to refill the attempt.
	h.Advance(10 * time.Minute)
	wantRejection(t, "10 minutes later", do(t, h, failed), 429, `{"error":"rate_limited","rule":"failed-logins"...`)
	h.Advance(6*time.Minute + time.Second)
	ok := req(":path", "/login", ":method", "POST", "x-user", "carol") // answered 200: costs nothing
	if res := do(t, h, ok); res.Rejected {
		t.Fatalf("16 minutes later: refused (%d %s)", res.Status, res.LocalBody)
	}
	if n := metric(h, "sluice.rule.failed-logins.blocked"); n != 1 {
		t.Errorf("failed-logins blocked %d identities, want 1", n)
	}
	if n := metric(h, "sluice.rule.trial-failed-logins.blocked"); n != 1 {
		t.Errorf("the shadow rule blocked %d identities, want 1", n)
	}
	// Telemetry reports the blocks per rule.
	got := sumCounts([]*telfmt.Report{decodeReport(t, reportsByVM(t, h, time.Second)[0], "sluice_admin", "/api/v1/telemetry", "t")})
	if got["failed-logins"].Blocked != 1 || got["trial-failed-logins"].Blocked != 1 {
		t.Errorf("the report's blocks: %d and %d, want 1 each", got["failed-logins"].Blocked, got["trial-failed-logins"].Blocked)
	}
	noRecoveredPanics(t, h)
}

func init() {
	register(Case{Name: "BlockSecondsLiftedEarlyByATimedOverride", Run: blockLifted})
}

// An operator lifts a block early with an override for the identity that
// refills at once (a rate and burst far above the rule's) and ends a few
// seconds later: the blocked bucket refills during it, and the identity is
// back to the rule's limits, its bucket full, when it ends.
func blockLifted(t *testing.T, start Starter) {
	h := mustStart(t, start, Options{Config: []byte(blockConfig), Start: noon})
	erin := req("x-user", "erin")
	admitted(t, h, 4, erin) // three, then the refusal that blocks her
	h.Advance(10 * time.Second)
	if res := do(t, h, erin); !res.Rejected {
		t.Fatal("erin, 10 s into her block: admitted")
	}
	until := noon.Add(15 * time.Second).Format(time.RFC3339)
	lift := strings.Replace(blockConfig, `"block_seconds": 60}`, `"block_seconds": 60},
   "overrides": [{"key": "erin", "algorithm_config": {"rps": 1e9, "burst": 1e9}, "until": "`+until+`"}]`, 1)
	if err := h.Reconfigure([]byte(lift)); err != nil {
		t.Fatal(err)
	}
	h.Advance(time.Second)
	wantAdmitted(t, h, "erin, the override lifting her block", erin)
	h.Advance(5 * time.Second) // the override has ended: the rule's burst of 3, full
	if got := admitted(t, h, 4, erin); got != 3 {
		t.Errorf("erin after the override: %d of 4 admitted, want the rule's 3", got)
	}
	if n := metric(h, "sluice.rule.login.blocked"); n != 2 {
		t.Errorf("blocked %d times, want 2: her first block, and her fourth request after the override", n)
	}
	noRecoveredPanics(t, h)
}

func init() {
	register(Case{Name: "BlockSecondsOfAnOverride", Run: blockOverridden})
}

// An override sets its identity's own block: 0 never blocks a partner the
// rule refuses, and a bot gets a longer one.
func blockOverridden(t *testing.T, start Starter) {
	config := strings.Replace(blockConfig, `"block_seconds": 60}`, `"block_seconds": 60},
   "overrides": [{"key": "partner", "algorithm_config": {"block_seconds": 0}},
                 {"key": "bot", "algorithm_config": {"block_seconds": 600}}]`, 1)
	h := mustStart(t, start, Options{Config: []byte(config), Start: noon})
	partner, bot := req("x-user", "partner"), req("x-user", "bot")
	admitted(t, h, 4, partner) // three, then an ordinary refusal
	admitted(t, h, 4, bot)     // three, then a ten-minute block
	h.Advance(time.Second)
	wantAdmitted(t, h, "the partner, a second after its refusal", partner)
	h.Advance(5 * time.Minute)
	if res := do(t, h, bot); !res.Rejected {
		t.Fatal("the bot, 5 minutes into its block: admitted")
	}
	h.Advance(5*time.Minute + time.Second)
	wantAdmitted(t, h, "the bot, once its 600 s and a token's second have passed", bot)
	if n := metric(h, "sluice.rule.login.blocked"); n != 1 {
		t.Errorf("blocked %d identities, want the bot only", n)
	}
	noRecoveredPanics(t, h)
}
