package rls

import (
	"errors"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
)

// Response is the part of RateLimitResponse Sluice reads.
type Response struct {
	OverallCode Code
	Statuses    []Status // in descriptor order
}

// Status is RateLimitResponse.DescriptorStatus.
type Status struct {
	Code Code
	// CurrentLimit is current_limit (requests_per_unit, unit), if sent.
	CurrentLimit    Override
	HasCurrentLimit bool
	// LimitRemaining is limit_remaining: whole tokens still available.
	LimitRemaining uint32
	// duration_until_reset, if sent.
	ResetSeconds int64
	ResetNanos   int32
	HasReset     bool
}

// ResetMillis returns duration_until_reset in milliseconds (0 when absent
// or not positive; bounded).
func (s *Status) ResetMillis() int64 {
	if !s.HasReset || s.ResetSeconds < 0 || (s.ResetSeconds == 0 && s.ResetNanos <= 0) {
		return 0
	}
	if s.ResetSeconds > 1<<40 {
		return 1 << 50
	}
	ms := s.ResetSeconds*1000 + int64(s.ResetNanos)/1e6
	if ms < 0 {
		return 0
	}
	return ms
}

// ErrTooManyStatuses: a response with more statuses than MaxStatuses.
var ErrTooManyStatuses = errors.New("rls: more than " + strconv.Itoa(MaxStatuses) + " descriptor statuses")

// DecodeError says where a response failed to decode.
type DecodeError struct {
	Field string
	Err   error
}

func (e *DecodeError) Error() string {
	return "rls: RateLimitResponse." + e.Field + ": " + e.Err.Error()
}

func (e *DecodeError) Unwrap() error { return e.Err }

// fieldFunc decodes one field of a message; it returns the bytes consumed
// (negative for a protowire error) and an error of its own.
type fieldFunc func(num protowire.Number, typ protowire.Type, b []byte) (int, error)

// walk decodes the fields of one message. A field fn does not claim (n == 0
// and no error) is skipped, as proto3 skips unknown fields; protobuf-go
// also treats a known field with an unexpected wire type as unknown.
func walk(b []byte, where string, fn fieldFunc) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return &DecodeError{where + "tag", protowire.ParseError(n)}
		}
		b = b[n:]
		n, err := fn(num, typ, b)
		if err != nil {
			return err
		}
		if n == 0 {
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return &DecodeError{where + "field " + strconv.Itoa(int(num)), protowire.ParseError(n)}
		}
		b = b[n:]
	}
	return nil
}

// Unmarshal decodes a RateLimitResponse into r, reusing r.Statuses. As
// proto3 requires, unknown fields are skipped, a repeated scalar keeps its
// last value and a repeated singular message is merged.
func (r *Response) Unmarshal(b []byte) error {
	r.OverallCode = 0
	r.Statuses = r.Statuses[:0]
	return walk(b, "", func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
		switch {
		case num == respOverallCode && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			r.OverallCode = Code(int32(v))
			return n, nil
		case num == respStatuses && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return n, nil
			}
			if len(r.Statuses) >= MaxStatuses {
				return 0, ErrTooManyStatuses
			}
			r.Statuses = append(r.Statuses, Status{})
			return n, r.Statuses[len(r.Statuses)-1].unmarshal(v)
		}
		return 0, nil
	})
}

func (s *Status) unmarshal(b []byte) error {
	return walk(b, "statuses.", func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
		switch {
		case num == statusCode && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			s.Code = Code(int32(v))
			return n, nil
		case num == statusRemaining && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			s.LimitRemaining = uint32(v)
			return n, nil
		case num == statusCurrentLimit && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return n, nil
			}
			s.HasCurrentLimit = true
			return n, s.CurrentLimit.unmarshal(v)
		case num == statusUntilReset && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return n, nil
			}
			s.HasReset = true
			return n, s.unmarshalDuration(v)
		}
		return 0, nil
	})
}

func (o *Override) unmarshal(b []byte) error {
	return walk(b, "statuses.current_limit.", func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
		if typ != protowire.VarintType || (num != limitRPU && num != limitUnit) {
			return 0, nil
		}
		v, n := protowire.ConsumeVarint(b)
		if num == limitRPU {
			o.RequestsPerUnit = uint32(v)
		} else {
			o.Unit = Unit(int32(v))
		}
		return n, nil
	})
}

func (s *Status) unmarshalDuration(b []byte) error {
	return walk(b, "statuses.duration_until_reset.", func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
		if typ != protowire.VarintType || (num != durationSeconds && num != durationNanos) {
			return 0, nil
		}
		v, n := protowire.ConsumeVarint(b)
		if num == durationSeconds {
			s.ResetSeconds = int64(v)
		} else {
			s.ResetNanos = int32(v)
		}
		return n, nil
	})
}
