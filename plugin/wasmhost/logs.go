package wasmhost

import (
	"fmt"
	"sync"
)

// LogEntry is one captured guest log line (proxy_log).
type LogEntry struct {
	VM      int // -1: the canary VM
	Level   LogLevel
	Message string
}

func (e LogEntry) String() string { return fmt.Sprintf("vm %d [%s] %s", e.VM, e.Level, e.Message) }

// logStore keeps the last max entries; seq numbers entries since the start.
type logStore struct {
	mu      sync.Mutex
	entries []LogEntry
	first   int // sequence number of entries[0]
	max     int
}

func (s *logStore) add(e LogEntry) {
	s.mu.Lock()
	s.entries = append(s.entries, e)
	if len(s.entries) > s.max {
		drop := len(s.entries) - s.max
		if drop < s.max/4 {
			drop = min(s.max/4, len(s.entries))
		}
		s.entries = append(s.entries[:0], s.entries[drop:]...)
		s.first += drop
	}
	s.mu.Unlock()
}

// next returns the sequence number the next entry will get.
func (s *logStore) next() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first + len(s.entries)
}

func (s *logStore) since(seq int, l LogLevel) []LogEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := max(0, seq-s.first)
	out := []LogEntry{}
	for _, e := range s.entries[min(i, len(s.entries)):] {
		if e.Level >= l {
			out = append(out, e)
		}
	}
	return out
}

func (s *logStore) sinceVM(seq, vm int) []LogEntry {
	var out []LogEntry
	for _, e := range s.since(seq, LogLevelTrace) {
		if e.VM == vm {
			out = append(out, e)
		}
	}
	return out
}

// log records a guest log line and echoes it to Config.LogFunc and
// Config.LogWriter.
func (h *Host) log(vm int, level LogLevel, msg string) {
	e := LogEntry{VM: vm, Level: level, Message: msg}
	h.logs.add(e)
	if f := h.cfg.LogFunc; f != nil {
		f(e)
	}
	if w := h.cfg.LogWriter; w != nil && level >= h.cfg.LogWriterLevel {
		fmt.Fprintf(w, "[wasm vm %d %s] %s\n", vm, level, msg)
	}
}
