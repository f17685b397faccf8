package rls

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func randString(r *rand.Rand) string {
	if r.IntN(5) == 0 {
		return ""
	}
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789_-:/é"
	b := []rune(alphabet)
	n := r.IntN(40)
	if r.IntN(20) == 0 {
		n = 200 + r.IntN(300) // multi-byte lengths
	}
	out := make([]rune, n)
	for i := range out {
		out[i] = b[r.IntN(len(b))]
	}
	return string(out)
}

func randUint64(r *rand.Rand) uint64 {
	switch r.IntN(4) {
	case 0:
		return 0
	case 1:
		return uint64(r.IntN(300))
	case 2:
		return r.Uint64()
	}
	return uint64(r.Uint32())
}

func randRequest(r *rand.Rand) (*Request, *rlsv3.RateLimitRequest) {
	mine := &Request{Domain: randString(r), HitsAddend: uint32(randUint64(r))}
	gen := &rlsv3.RateLimitRequest{Domain: mine.Domain, HitsAddend: mine.HitsAddend}
	for range r.IntN(6) {
		var d Descriptor
		gd := &commonrl.RateLimitDescriptor{}
		for range r.IntN(4) {
			e := Entry{Key: randString(r), Value: randString(r)}
			d.Entries = append(d.Entries, e)
			gd.Entries = append(gd.Entries, &commonrl.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
		}
		if r.IntN(2) == 0 {
			d.Limit = &Override{RequestsPerUnit: uint32(randUint64(r)), Unit: Unit(r.IntN(7))}
			gd.Limit = &commonrl.RateLimitDescriptor_RateLimitOverride{
				RequestsPerUnit: d.Limit.RequestsPerUnit, Unit: typev3.RateLimitUnit(d.Limit.Unit)}
		}
		if r.IntN(3) != 0 {
			d.HasHitsAddend, d.HitsAddend = true, randUint64(r)
			gd.HitsAddend = wrapperspb.UInt64(d.HitsAddend)
		}
		mine.Descriptors = append(mine.Descriptors, d)
		gen.Descriptors = append(gen.Descriptors, gd)
	}
	return mine, gen
}

// TestRequestMatchesGenerated: the hand encoding is byte for byte what
// proto.Marshal makes of go-control-plane's generated message.
func TestRequestMatchesGenerated(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		mine, gen := randRequest(r)
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(gen)
		if err != nil {
			t.Fatal(err)
		}
		got := AppendRequest(nil, mine)
		if !bytes.Equal(got, want) {
			t.Fatalf("message %d: encoding differs\n got %x\nwant %x", i, got, want)
		}
		if RequestSize(mine) != len(want) {
			t.Fatalf("message %d: RequestSize %d, encoding %d", i, RequestSize(mine), len(want))
		}
		back := &rlsv3.RateLimitRequest{}
		if err := proto.Unmarshal(got, back); err != nil || !proto.Equal(back, gen) {
			t.Fatalf("message %d: does not round-trip: %v", i, err)
		}
	}
}

func randResponse(r *rand.Rand) *rlsv3.RateLimitResponse {
	g := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_Code(r.IntN(4))}
	for range r.IntN(6) {
		s := &rlsv3.RateLimitResponse_DescriptorStatus{
			Code:           rlsv3.RateLimitResponse_Code(r.IntN(3)),
			LimitRemaining: uint32(randUint64(r)),
		}
		if r.IntN(2) == 0 {
			s.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{
				Name:            randString(r),
				RequestsPerUnit: uint32(randUint64(r)),
				Unit:            rlsv3.RateLimitResponse_RateLimit_Unit(r.IntN(7)),
			}
		}
		if r.IntN(2) == 0 {
			s.DurationUntilReset = &durationpb.Duration{Seconds: int64(r.IntN(100000)) - 10, Nanos: int32(r.IntN(1e9))}
		}
		if r.IntN(4) == 0 {
			s.Quota = &rlsv3.RateLimitResponse_Quota{Id: randString(r)}
		}
		g.Statuses = append(g.Statuses, s)
	}
	// Fields Sluice does not read must be skipped.
	if r.IntN(3) == 0 {
		g.ResponseHeadersToAdd = []*corev3.HeaderValue{{Key: "x-a", Value: randString(r)}}
		g.RawBody = []byte(randString(r))
	}
	return g
}

// TestResponseMatchesGenerated: Unmarshal reads what proto.Marshal wrote.
func TestResponseMatchesGenerated(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var got Response
	for i := range 5000 {
		g := randResponse(r)
		b, err := proto.Marshal(g)
		if err != nil {
			t.Fatal(err)
		}
		if err := got.Unmarshal(b); err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		if msg := compare(&got, g); msg != "" {
			t.Fatalf("response %d: %s", i, msg)
		}
	}
}

func compare(got *Response, g *rlsv3.RateLimitResponse) string {
	if int32(got.OverallCode) != int32(g.OverallCode) {
		return "overall_code"
	}
	if len(got.Statuses) != len(g.Statuses) {
		return "statuses count"
	}
	for j, s := range g.Statuses {
		m := &got.Statuses[j]
		if int32(m.Code) != int32(s.Code) || m.LimitRemaining != s.LimitRemaining {
			return "code or limit_remaining"
		}
		if m.HasCurrentLimit != (s.CurrentLimit != nil) || m.HasReset != (s.DurationUntilReset != nil) {
			return "presence"
		}
		if s.CurrentLimit != nil && (m.CurrentLimit.RequestsPerUnit != s.CurrentLimit.RequestsPerUnit ||
			int32(m.CurrentLimit.Unit) != int32(s.CurrentLimit.Unit)) {
			return "current_limit"
		}
		if s.DurationUntilReset != nil && (m.ResetSeconds != s.DurationUntilReset.Seconds || m.ResetNanos != s.DurationUntilReset.Nanos) {
			return "duration_until_reset"
		}
	}
	return ""
}

func TestFrame(t *testing.T) {
	req := &Request{Domain: "sluice", Descriptors: []Descriptor{{Entries: []Entry{{"sluice_rule", "r"}}, HasHitsAddend: true, HitsAddend: 7}}}
	f := AppendFrame(nil, req)
	msg, err := Unframe(f)
	if err != nil || !bytes.Equal(msg, AppendRequest(nil, req)) {
		t.Fatalf("Unframe(AppendFrame) = %x, %v", msg, err)
	}
	cases := []struct {
		body []byte
		want error
	}{
		{nil, ErrShortFrame},
		{[]byte{0, 0, 0}, ErrShortFrame},
		{[]byte{0, 0, 0, 0, 5, 1}, ErrShortFrame},
		{[]byte{1, 0, 0, 0, 0}, ErrCompressedFrame},
		{[]byte{0, 0xff, 0xff, 0xff, 0xff}, ErrFrameTooLarge},
		{[]byte{0, 0, 0, 0, 1, 8, 9}, ErrTrailingData},
	}
	for _, c := range cases {
		if _, err := Unframe(c.body); !errors.Is(err, c.want) {
			t.Errorf("Unframe(%x) = %v, want %v", c.body, err, c.want)
		}
	}
	if m, err := Unframe([]byte{0, 0, 0, 0, 0}); err != nil || len(m) != 0 {
		t.Errorf("empty message: %x, %v", m, err)
	}
}

func TestUnmarshalErrors(t *testing.T) {
	var r Response
	for _, b := range [][]byte{
		{0x08},                   // truncated varint
		{0x12, 0x05, 0x08},       // status longer than the message
		{0x12, 0x02, 0x22, 0x05}, // duration longer than the status
		{0x00},                   // field number 0
		{0x0f},                   // invalid wire type 7
	} {
		if err := r.Unmarshal(b); err == nil {
			t.Errorf("Unmarshal(%x) accepted", b)
		}
	}
	many := bytes.Repeat([]byte{0x12, 0x00}, MaxStatuses+1)
	if err := r.Unmarshal(many); !errors.Is(err, ErrTooManyStatuses) {
		t.Errorf("too many statuses: %v", err)
	}
}

func TestResetMillis(t *testing.T) {
	for _, c := range []struct {
		s    Status
		want int64
	}{
		{Status{}, 0},
		{Status{HasReset: true, ResetSeconds: 2, ResetNanos: 5e8}, 2500},
		{Status{HasReset: true, ResetSeconds: -1}, 0},
		{Status{HasReset: true, ResetSeconds: 1 << 62}, 1 << 50},
	} {
		if got := c.s.ResetMillis(); got != c.want {
			t.Errorf("%+v: %d, want %d", c.s, got, c.want)
		}
	}
}

// FuzzUnmarshal: never a panic; whatever proto.Unmarshal accepts, Unmarshal
// reads the same values (up to MaxStatuses).
func FuzzUnmarshal(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 20 {
		b, _ := proto.Marshal(randResponse(r))
		f.Add(b)
	}
	f.Add([]byte{0x12, 0x02, 0x22, 0x05})
	f.Add([]byte{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		var got Response
		err := got.Unmarshal(b)
		g := &rlsv3.RateLimitResponse{}
		if proto.Unmarshal(b, g) != nil || len(g.Statuses) > MaxStatuses {
			return
		}
		if err != nil {
			t.Fatalf("proto accepts %x, Unmarshal: %v", b, err)
		}
		if msg := compare(&got, g); msg != "" {
			t.Fatalf("%x: %s differs", b, msg)
		}
	})
}

// FuzzUnframe: never a panic; an accepted frame's message has the declared
// length.
func FuzzUnframe(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 2, 8, 1})
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Unframe(b)
		if err == nil && len(m)+5 != len(b) {
			t.Fatalf("accepted %x as %x", b, m)
		}
	})
}
