// Package rls encodes and decodes the messages of Envoy's rate limit service
// API v3 (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) by
// hand, with protowire, plus gRPC's length-prefixed framing. It is pure Go
// with no I/O, compiled into the wasm filter (fleet mode, docs/filter.md
// "Fleet mode") where linking the protobuf runtime and the generated
// go-control-plane types would add megabytes to the module.
//
// Only the fields Sluice uses are modelled; the decoder skips every other
// field as proto3 requires. Field numbers follow
// envoy/service/ratelimit/v3/rls.proto and
// envoy/extensions/common/ratelimit/v3/ratelimit.proto; the tests cross-check
// the bytes against go-control-plane's generated messages.
package rls

import (
	"errors"

	"google.golang.org/protobuf/encoding/protowire"
)

// MethodPath is the gRPC method of ShouldRateLimit.
const MethodPath = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// Code is RateLimitResponse.Code.
type Code int32

const (
	CodeUnknown   Code = 0
	CodeOK        Code = 1
	CodeOverLimit Code = 2
)

// Unit is envoy.type.v3.RateLimitUnit (request side) and
// RateLimitResponse.RateLimit.Unit (response side): the same numbers.
type Unit int32

const (
	UnitUnknown Unit = 0
	UnitSecond  Unit = 1
	UnitMinute  Unit = 2
	UnitHour    Unit = 3
	UnitDay     Unit = 4
)

// Entry is one RateLimitDescriptor.Entry.
type Entry struct{ Key, Value string }

// Override is RateLimitDescriptor.RateLimitOverride.
type Override struct {
	RequestsPerUnit uint32
	Unit            Unit
}

// Descriptor is one envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.
type Descriptor struct {
	Entries []Entry
	// Limit, when set, asks a third-party RLS to apply this limit.
	Limit *Override
	// HitsAddend is the descriptor-level hits_addend (a UInt64Value
	// wrapper, field 3), sent when HasHitsAddend is set, even if 0.
	HitsAddend    uint64
	HasHitsAddend bool
}

// Request is RateLimitRequest.
type Request struct {
	Domain      string
	Descriptors []Descriptor
	HitsAddend  uint32 // request-level hits_addend; 0 is not sent
}

// Field numbers.
const (
	reqDomain      = 1
	reqDescriptors = 2
	reqHitsAddend  = 3

	descEntries    = 1
	descLimit      = 2
	descHitsAddend = 3

	entryKey   = 1
	entryValue = 2

	overrideRPU  = 1
	overrideUnit = 2

	wrapperValue = 1

	respOverallCode = 1
	respStatuses    = 2

	statusCode         = 1
	statusCurrentLimit = 2
	statusRemaining    = 3
	statusUntilReset   = 4
	limitRPU           = 1
	limitUnit          = 2
	durationSeconds    = 1
	durationNanos      = 2

	grpcHeaderLen = 5
	// MaxStatuses bounds the statuses decoded from one response.
	MaxStatuses = 4096
	// MaxMessage is the largest gRPC message accepted.
	MaxMessage = 4 << 20
)

// AppendRequest appends the protobuf encoding of r to b, field by field in
// field-number order, the order proto.Marshal uses.
func AppendRequest(b []byte, r *Request) []byte {
	if r.Domain != "" {
		b = protowire.AppendTag(b, reqDomain, protowire.BytesType)
		b = protowire.AppendString(b, r.Domain)
	}
	for i := range r.Descriptors {
		d := &r.Descriptors[i]
		b = protowire.AppendTag(b, reqDescriptors, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(descriptorSize(d)))
		b = appendDescriptor(b, d)
	}
	if r.HitsAddend != 0 {
		b = protowire.AppendTag(b, reqHitsAddend, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(r.HitsAddend))
	}
	return b
}

func appendDescriptor(b []byte, d *Descriptor) []byte {
	for _, e := range d.Entries {
		b = protowire.AppendTag(b, descEntries, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(entrySize(e)))
		if e.Key != "" {
			b = protowire.AppendTag(b, entryKey, protowire.BytesType)
			b = protowire.AppendString(b, e.Key)
		}
		if e.Value != "" {
			b = protowire.AppendTag(b, entryValue, protowire.BytesType)
			b = protowire.AppendString(b, e.Value)
		}
	}
	if d.Limit != nil {
		b = protowire.AppendTag(b, descLimit, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(overrideSize(d.Limit)))
		if d.Limit.RequestsPerUnit != 0 {
			b = protowire.AppendTag(b, overrideRPU, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(d.Limit.RequestsPerUnit))
		}
		if d.Limit.Unit != 0 {
			b = protowire.AppendTag(b, overrideUnit, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(int64(d.Limit.Unit)))
		}
	}
	if d.HasHitsAddend {
		b = protowire.AppendTag(b, descHitsAddend, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(wrapperSize(d.HitsAddend)))
		if d.HitsAddend != 0 {
			b = protowire.AppendTag(b, wrapperValue, protowire.VarintType)
			b = protowire.AppendVarint(b, d.HitsAddend)
		}
	}
	return b
}

func stringField(s string) int {
	if s == "" {
		return 0
	}
	return 1 + protowire.SizeBytes(len(s))
}

func varintField(v uint64) int {
	if v == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(v)
}

func nested(n int) int { return 1 + protowire.SizeBytes(n) }

func entrySize(e Entry) int { return stringField(e.Key) + stringField(e.Value) }

func overrideSize(o *Override) int {
	return varintField(uint64(o.RequestsPerUnit)) + varintField(uint64(int64(o.Unit)))
}

func wrapperSize(v uint64) int { return varintField(v) }

func descriptorSize(d *Descriptor) int {
	n := 0
	for _, e := range d.Entries {
		n += nested(entrySize(e))
	}
	if d.Limit != nil {
		n += nested(overrideSize(d.Limit))
	}
	if d.HasHitsAddend {
		n += nested(wrapperSize(d.HitsAddend))
	}
	return n
}

// RequestSize is the length of r's encoding.
func RequestSize(r *Request) int {
	n := stringField(r.Domain) + varintField(uint64(r.HitsAddend))
	for i := range r.Descriptors {
		n += nested(descriptorSize(&r.Descriptors[i]))
	}
	return n
}

// AppendFrame appends r as one gRPC message: an uncompressed flag byte, the
// big-endian 32-bit length, then the message.
func AppendFrame(b []byte, r *Request) []byte {
	n := RequestSize(r)
	b = append(b, 0, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	return AppendRequest(b, r)
}

// Frame errors.
var (
	ErrShortFrame      = errors.New("rls: gRPC frame shorter than its header or its declared length")
	ErrCompressedFrame = errors.New("rls: compressed gRPC message (no grpc-encoding was negotiated)")
	ErrFrameTooLarge   = errors.New("rls: gRPC message larger than 4 MiB")
	ErrTrailingData    = errors.New("rls: data after the gRPC message (ShouldRateLimit is unary)")
)

// Unframe returns the one gRPC message in body (a unary response body).
func Unframe(body []byte) ([]byte, error) {
	if len(body) < grpcHeaderLen {
		return nil, ErrShortFrame
	}
	if body[0] != 0 {
		return nil, ErrCompressedFrame
	}
	n := uint64(body[1])<<24 | uint64(body[2])<<16 | uint64(body[3])<<8 | uint64(body[4])
	if n > MaxMessage {
		return nil, ErrFrameTooLarge
	}
	if uint64(len(body)-grpcHeaderLen) < n {
		return nil, ErrShortFrame
	}
	if uint64(len(body)-grpcHeaderLen) > n {
		return nil, ErrTrailingData
	}
	return body[grpcHeaderLen:], nil
}
