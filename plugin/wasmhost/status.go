package wasmhost

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Status is a proxy-wasm status code (WasmResult), as returned to the guest
// by host calls.
type Status uint32

// Status values as defined by the proxy-wasm ABI.
const (
	StatusOK                   Status = 0
	StatusNotFound             Status = 1
	StatusBadArgument          Status = 2
	StatusSerializationFailure Status = 3
	StatusParseFailure         Status = 4
	StatusBadExpression        Status = 5
	StatusInvalidMemoryAccess  Status = 6
	StatusEmpty                Status = 7
	StatusCasMismatch          Status = 8
	StatusResultMismatch       Status = 9
	StatusInternalFailure      Status = 10
	StatusBrokenConnection     Status = 11
	StatusUnimplemented        Status = 12

	// StatusCASMismatch is StatusCasMismatch (Go-style spelling).
	StatusCASMismatch = StatusCasMismatch
)

var statusNames = [...]string{
	"OK", "NotFound", "BadArgument", "SerializationFailure", "ParseFailure", "BadExpression",
	"InvalidMemoryAccess", "Empty", "CasMismatch", "ResultMismatch", "InternalFailure",
	"BrokenConnection", "Unimplemented",
}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "Status(" + strconv.FormatUint(uint64(s), 10) + ")"
}

// LogLevel is a proxy-wasm log level.
type LogLevel int

// Log levels with their proxy-wasm values.
const (
	LogLevelTrace    LogLevel = 0
	LogLevelDebug    LogLevel = 1
	LogLevelInfo     LogLevel = 2
	LogLevelWarn     LogLevel = 3
	LogLevelError    LogLevel = 4
	LogLevelCritical LogLevel = 5
)

var levelNames = [...]string{"trace", "debug", "info", "warn", "error", "critical"}

func (l LogLevel) String() string {
	if l >= 0 && int(l) < len(levelNames) {
		return levelNames[l]
	}
	return "level(" + strconv.Itoa(int(l)) + ")"
}

// Action is what a stream callback returned.
type Action int

// Actions with their proxy-wasm values.
const (
	ActionContinue Action = 0
	ActionPause    Action = 1
)

func (a Action) String() string {
	switch a {
	case ActionContinue:
		return "Continue"
	case ActionPause:
		return "Pause"
	}
	return "Action(" + strconv.Itoa(int(a)) + ")"
}

// TrapError reports that the guest trapped (a wasm trap, a Go panic that made
// the guest exit, or a host function that panicked while the guest called
// it) during Callback on VM. The VM is unusable afterwards: every later call
// on it returns an error wrapping this one.
type TrapError struct {
	VM       int
	Callback string // e.g. "proxy_on_request_headers"
	Err      error
	Stderr   string // the tail of what the guest wrote to stderr (a Go guest prints its panic there)
}

func (e *TrapError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "wasmhost: vm %d trapped in %s: %v", e.VM, e.Callback, firstLines(e.Err, 12))
	if s := strings.TrimSpace(e.Stderr); s != "" {
		fmt.Fprintf(&b, "\nguest stderr:\n%s", s)
	}
	return b.String()
}

func (e *TrapError) Unwrap() error { return e.Err }

func firstLines(err error, n int) string {
	s := err.Error()
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = append(lines[:n], "\t...")
	}
	return strings.Join(lines, "\n")
}

// ErrClosed is returned by calls on a closed Host or VM.
var ErrClosed = errors.New("wasmhost: host is closed")

// brokenError is returned by calls on a VM that trapped before.
type brokenError struct{ trap *TrapError }

func (e *brokenError) Error() string {
	msg := fmt.Sprintf("wasmhost: vm %d is unusable: it trapped earlier in %s: %s",
		e.trap.VM, e.trap.Callback, strings.SplitN(e.trap.Err.Error(), "\n", 2)[0])
	if p := panicLine(e.trap.Stderr); p != "" {
		msg += " (guest: " + p + ")"
	}
	return msg
}

// panicLine returns the line of a Go guest's stderr that says why it died.
func panicLine(stderr string) string {
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") {
			return l
		}
	}
	return ""
}

func (e *brokenError) Unwrap() error { return e.trap }
