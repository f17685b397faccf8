package fleet

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
	"github.com/sluice-rl/sluice/admin/policies"
)

// fakeBackend grants everything and counts the ops it ran.
type fakeBackend struct{ ops int }

func (f *fakeBackend) Run(_ context.Context, ops []redisgcra.Op) ([]redisgcra.Outcome, error) {
	f.ops += len(ops)
	out := make([]redisgcra.Outcome, len(ops))
	for i := range out {
		out[i].Allowed = true
	}
	return out, nil
}

func (f *fakeBackend) Ping(context.Context) error { return nil }

func entries(kv ...string) []*ratelimitv3.RateLimitDescriptor_Entry {
	var es []*ratelimitv3.RateLimitDescriptor_Entry
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return es
}

func TestMalformedRequestsAreRefusedNamingTheField(t *testing.T) {
	many := make([]*ratelimitv3.RateLimitDescriptor, MaxDescriptors+1)
	for i := range many {
		many[i] = desc("api", "x", 1, false)
	}
	d := func(es []*ratelimitv3.RateLimitDescriptor_Entry) []*ratelimitv3.RateLimitDescriptor {
		return []*ratelimitv3.RateLimitDescriptor{{Entries: es}}
	}
	cases := []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{"empty domain", &rlsv3.RateLimitRequest{Descriptors: d(entries(KeyRule, "api", KeyID, "x"))}, "domain: empty"},
		{"long domain", &rlsv3.RateLimitRequest{Domain: strings.Repeat("d", 257), Descriptors: d(entries(KeyRule, "a", KeyID, "x"))}, "domain: 257 bytes"},
		{"no descriptors", &rlsv3.RateLimitRequest{Domain: "sluice"}, "descriptors: empty"},
		{"too many", &rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: many}, "descriptors: 257, over the limit of 256"},
		{"nil descriptor", &rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: []*ratelimitv3.RateLimitDescriptor{nil}}, "descriptors[0]: missing"},
		{"no entries", &rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: d(nil)}, "descriptors[0].entries: empty"},
		{"nil entry", &rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: d([]*ratelimitv3.RateLimitDescriptor_Entry{nil})}, "descriptors[0].entries[0]: missing"},
		{"missing id", &rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: d(entries(KeyRule, "api"))}, "descriptors[0].entries: sluice_id missing"},
		{"missing rule", &rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: d(entries(KeyID, "x"))}, "descriptors[0].entries: sluice_rule missing"},
		{"op alone", &rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: d(entries(KeyOp, "return"))}, "sluice_rule missing"},
		{"empty rule", &rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: d(entries(KeyRule, "", KeyID, "x"))}, "descriptors[0].entries[0]: empty value"},
		{"long id", &rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: d(entries(KeyRule, "a", KeyID, strings.Repeat("i", 257)))}, "entries[1]: value of 257 bytes"},
		{"twice", &rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: d(entries(KeyRule, "a", KeyID, "x", KeyID, "y"))}, "entries[2]: appears twice"},
		{"bad op", &rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: d(entries(KeyRule, "a", KeyID, "x", KeyOp, "refund"))}, `entries[2]: sluice_op "refund": want "return", "charge" or "block"`},
		{"extra key", &rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: d(entries(KeyRule, "a", KeyID, "x", "sluice_idd", "y"))}, `unknown key "sluice_idd"`},
		{"unknown unit", &rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: entries(KeyRule, "a", KeyID, "x"), Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5}}}},
			"descriptors[0].limit.unit: UNKNOWN"},
		{"zero multiplier", &rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: entries(KeyRule, "a", KeyID, "x"), Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{
				RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_SECOND, UnitMultiplier: wrapperspb.UInt32(0)}}}},
			"descriptors[0].limit.unit_multiplier: 0"},
	}
	m := NewMetrics()
	fb := &fakeBackend{}
	s := NewServer(Options{Backend: fb, Rules: &StaticRules{}, Metrics: m})
	for _, c := range cases {
		_, err := s.ShouldRateLimit(context.Background(), c.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), c.want) {
			t.Errorf("%s: %v, want INVALID_ARGUMENT containing %q", c.name, err, c.want)
		}
	}
	if fb.ops != 0 {
		t.Errorf("%d Redis ops for invalid requests", fb.ops)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues(RequestInvalid)); got != float64(len(cases)) {
		t.Errorf("invalid requests = %g, want %d", got, len(cases))
	}
	if _, err := s.ShouldRateLimit(context.Background(), nil); status.Code(err) != codes.InvalidArgument {
		t.Errorf("nil request: %v", err)
	}
}

func TestHugeHitsAddendStaysInTheScriptsExactRange(t *testing.T) {
	fb := &fakeBackend{}
	s := NewServer(Options{Backend: fb, Rules: &StaticRules{Limits: map[string]redisgcra.Limit{"api": {Rate: 1e-9, Burst: 1e12}}}})
	// The fake grants everything: this checks the op sent, clamped.
	var seen []redisgcra.Op
	s.backend = recordOps{fb, &seen}
	maxReturn := desc("api", "x", 0, true)
	maxReturn.HitsAddend = wrapperspb.UInt64(math.MaxUint64)
	maxTake := desc("api", "x", 0, false)
	maxTake.HitsAddend = wrapperspb.UInt64(math.MaxUint64)
	_, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "sluice",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("api", "x", -1, false), maxReturn, maxTake}, HitsAddend: math.MaxUint32})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 3 {
		t.Fatalf("%d ops, want 3", len(seen))
	}
	for _, op := range seen {
		if op.Amount < 0 || op.Amount > redisgcra.MaxMicros || op.Tau < 0 || op.Tau > redisgcra.MaxMicros {
			t.Errorf("op %+v out of the script's exact range", op)
		}
	}
}

type recordOps struct {
	Backend
	seen *[]redisgcra.Op
}

func (r recordOps) Run(ctx context.Context, ops []redisgcra.Op) ([]redisgcra.Outcome, error) {
	*r.seen = append(*r.seen, ops...)
	return r.Backend.Run(ctx, ops)
}

func TestGlobalRulesFromPolicyJSON(t *testing.T) {
	doc := `{"mode":"enforce","fleet":{"cluster":"rls"},"policies":[{"name":"p","rules":[
	  {"name":"g1","scope":"global","limit_keys":["header:x-k"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":10,"burst":20}},
	  {"name":"local","limit_keys":["header:x-k"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":1,"burst":1}}]},
	  {"name":"q","rules":[{"name":"g2","scope":"global","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":0.5,"burst":3}}]}]}`
	var p PolicyRules
	if _, ok := p.GlobalLimit("g1"); ok {
		t.Fatal("a rule before any policy")
	}
	p.Set(7, []byte(doc))
	if l, ok := p.GlobalLimit("g1"); !ok || l != (redisgcra.Limit{Rate: 10, Burst: 20}) {
		t.Errorf("g1 = %+v %v", l, ok)
	}
	if l, ok := p.GlobalLimit("g2"); !ok || l != (redisgcra.Limit{Rate: 0.5, Burst: 3}) {
		t.Errorf("g2 = %+v %v", l, ok)
	}
	for _, name := range []string{"local", "nope"} {
		if _, ok := p.GlobalLimit(name); ok {
			t.Errorf("%s is a global rule", name)
		}
	}
	if got := strings.Join(p.Names(), ","); got != "g1,g2" || p.Version() != 7 {
		t.Errorf("names %q version %d", got, p.Version())
	}
	p.Set(8, []byte("not json"))
	if len(p.Names()) != 0 {
		t.Error("rules kept from an unreadable document")
	}
	// A document the shared parser refuses (a rate of 0) has no rules.
	p.Set(9, []byte(strings.Replace(doc, `"tokens_per_second":10`, `"tokens_per_second":0`, 1)))
	if len(p.Names()) != 0 {
		t.Error("rules kept from a document the parser refuses")
	}
}

// FuzzShouldRateLimit feeds arbitrary wire bytes as a request: the answer
// is a response with one status per descriptor or INVALID_ARGUMENT, never
// a panic.
func FuzzShouldRateLimit(f *testing.F) {
	seed := func(r *rlsv3.RateLimitRequest) {
		b, _ := proto.Marshal(r)
		f.Add(b)
	}
	seed(&rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("api", "x", 3, false)}})
	seed(&rlsv3.RateLimitRequest{Domain: "sluice", HitsAddend: 9, Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("api", "x", -1, true), desc("other", "y", 1<<40, false)}})
	seed(&rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: entries(KeyRule, "a", KeyID, "x"), Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_YEAR,
			UnitMultiplier: wrapperspb.UInt32(1 << 31)}}}})
	seed(&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: entries("generic_key", "v")}}})
	seed(&rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("win", "x", 2, false),
		windowReturn("win", "x", 1, 1772366460000)}})
	seed(&rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: []*ratelimitv3.RateLimitDescriptor{chargeDesc("api", "x", 1<<40), chargeDesc("win", "x", 1)}})
	seed(&rlsv3.RateLimitRequest{Domain: "sluice", HitsAddend: 2, Descriptors: []*ratelimitv3.RateLimitDescriptor{blockDesc("api", "x", 0), blockDesc("win", "x", 3),
		blockDesc("nope", "y", -1), blockDesc("blocks", "x", 1<<40)}})
	s := NewServer(Options{Backend: &fakeBackend{}, Rules: &StaticRules{Limits: map[string]redisgcra.Limit{"api": {Rate: 2, Burst: 5},
		"blocks": {Rate: 2, Burst: 5, BlockSeconds: 60}},
		Windows: map[string]Window{"win": {Limit: 10, Seconds: 60}}}})
	f.Fuzz(func(t *testing.T, wire []byte) {
		var req rlsv3.RateLimitRequest
		if proto.Unmarshal(wire, &req) != nil {
			return
		}
		resp, err := s.ShouldRateLimit(context.Background(), &req)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("error %v, want INVALID_ARGUMENT", err)
			}
			return
		}
		if len(resp.Statuses) != len(req.Descriptors) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(req.Descriptors))
		}
	})
}

type countingPublisher struct{ got []int64 }

func (c *countingPublisher) Publish(_ context.Context, v policies.Version) error {
	c.got = append(c.got, v.Number)
	return nil
}

func TestPolicyRulesFollowPublishedVersions(t *testing.T) {
	var rules PolicyRules
	next := &countingPublisher{}
	pub := rules.Publisher(next)
	doc := func(rate float64) []byte {
		return fmt.Appendf(nil, `{"fleet":{"cluster":"rls"},"policies":[{"name":"p","rules":[{"name":"g","scope":"global","limit_keys":["header:x-k"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":%g,"burst":100}}]}]}`, rate)
	}
	if err := pub.Publish(context.Background(), policies.Version{Number: 3, JSON: doc(10)}); err != nil {
		t.Fatal(err)
	}
	if l, _ := rules.GlobalLimit("g"); l.Rate != 10 {
		t.Errorf("v3: rate %g", l.Rate)
	}
	if err := pub.Publish(context.Background(), policies.Version{Number: 4, JSON: doc(20)}); err != nil {
		t.Fatal(err)
	}
	if l, _ := rules.GlobalLimit("g"); l.Rate != 20 || rules.Version() != 4 {
		t.Errorf("v4: rate %g version %d", l.Rate, rules.Version())
	}
	if fmt.Sprint(next.got) != "[3 4]" {
		t.Errorf("next publisher got %v", next.got)
	}
	if err := rules.Publisher(nil).Publish(context.Background(), policies.Version{Number: 5, JSON: doc(30)}); err != nil {
		t.Errorf("no next publisher: %v", err)
	}
}
