package policies

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/shared/policycheck"
)

// A policy that follows a file (docs/admin.md "A policy kept in Git"):
// the file, a ConfigMap that Argo CD, Flux or helm keeps as Git says, is
// the only way to change the policy. The service looks at it every few
// seconds and, when it differs from the current version, saves it like
// any save (validated, checked against the saved tests) but without
// review: its review happened in Git. Every other change is refused with
// a *ManagedError, so the admin never drifts from Git and a look never
// undoes a change someone made here.

// FileAuthor is the author of the versions saved from the file.
const FileAuthor = "git"

// DefaultFileInterval is how often the file is looked at: a mounted
// ConfigMap changes about a minute after its object does, so a few
// seconds more cost nothing.
const DefaultFileInterval = 10 * time.Second

// FileSource is what the policy follows.
type FileSource struct {
	Policy string // the policy's JSON file
	// Tests is the policy tests' file (docs/policy-tests.md), "" for none:
	// then the saved tests, changed on the admin's Tests page, still check
	// every version the file brings.
	Tests string
	// OnSave is called after each version (or tests revision, with v the
	// current version) the file brought: the caller audits and counts it.
	OnSave func(v Version, testsOnly bool)
}

// FileStatus is what the last look at the file found.
type FileStatus struct {
	Policy, Tests string
	SHA256        string    // of the policy file as last read, hex; "" when unreadable
	Version       int64     // the current version, when it is the file's content; else 0
	Checked       time.Time // the last look
	InSync        time.Time // the last look that found the current version equal to the file
	// Err says why the current version is not the file's content, ""
	// when it is: the file unreadable or invalid, or failing the tests.
	Err string
}

// ManagedError refuses a change to a policy that follows a file.
type ManagedError struct {
	Path string
	What string // "save", "rollback", "tests"
}

func (e *ManagedError) Error() string {
	what := "this policy"
	if e.What == "tests" {
		what = "the tests"
	}
	return fmt.Sprintf("the policy follows %s: change %s there (in Git), not here; nothing was saved", e.Path, what)
}

// fileState is the service's side of a FileSource.
type fileState struct {
	src    FileSource
	mu     sync.Mutex // one look at a time; guards status, logged and synced
	status FileStatus
	logged string // the last failure logged, so that a bad file is logged once
	// synced is what the last look that found the policy applied read:
	// the files' content (their hashes) and the current version. While
	// both are the same, a look needs no parse and no comparison: a large
	// policy costs a parse of a few hundred milliseconds.
	synced struct {
		files   string
		version int64
	}
}

// FollowFile makes the policy follow src from now on: call it before the
// service takes requests, then LookAtFile (or KeepFollowingFile).
func (s *Service) FollowFile(src FileSource) {
	s.file.Store(&fileState{src: src, status: FileStatus{Policy: src.Policy, Tests: src.Tests}})
}

// FileStatus returns what the last look at the followed file found; ok is
// false when the policy follows no file.
func (s *Service) FileStatus() (st FileStatus, ok bool) {
	f := s.file.Load()
	if f == nil {
		return FileStatus{}, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.status, true
}

// managed refuses what (a save, rollback or tests change) when the policy
// follows a file; tests are refused only when the file brings them.
func (s *Service) managed(what string) error {
	f := s.file.Load()
	switch {
	case f == nil:
		return nil
	case what == "tests" && f.src.Tests == "":
		return nil
	case what == "tests":
		return &ManagedError{Path: f.src.Tests, What: what}
	}
	return &ManagedError{Path: f.src.Policy, What: what}
}

// KeepFollowingFile looks at the file every interval until ctx ends.
func (s *Service) KeepFollowingFile(ctx context.Context, every time.Duration) {
	if every <= 0 {
		every = DefaultFileInterval
	}
	tick(ctx, every, func() { s.LookAtFile(ctx) }) // follow.go
}

// LookAtFile reads the followed file and, if its content is not the
// current version's, saves it (and the tests file's, when there is one).
// A file that cannot be read, is invalid or fails the tests changes
// nothing: the current version stays, and the status and the log say why.
func (s *Service) LookAtFile(ctx context.Context) FileStatus {
	f := s.file.Load()
	if f == nil {
		return FileStatus{}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	st := FileStatus{Policy: f.src.Policy, Tests: f.src.Tests, Checked: s.now(), InSync: f.status.InSync}
	// Another admin sharing the database may save the same file at the same
	// time: a conflict is looked at again at once, and finds it saved.
	var err error
	for range 3 {
		if err = s.applyFile(ctx, f, &st); !errors.As(err, new(*ConflictError)) && !errors.As(err, new(*TestsConflictError)) {
			break
		}
	}
	if err != nil {
		st.Version, st.Err = 0, err.Error()
		if msg := st.SHA256 + st.Err; msg != f.logged {
			f.logged = msg
			s.log.Error("the policy file was not applied; the current version stays", "file", f.src.Policy, "sha256", st.SHA256, "err", st.Err)
		}
	} else {
		st.InSync, f.logged = st.Checked, ""
	}
	f.status = st
	return st
}

// applyFile is one look: it fills st.SHA256 and st.Version.
func (s *Service) applyFile(ctx context.Context, f *fileState, st *FileStatus) error {
	src := f.src
	doc, err := readFile(src.Policy, MaxConfigBytes)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(doc)
	st.SHA256 = hex.EncodeToString(sum[:])
	files := st.SHA256
	var tests *string
	if src.Tests != "" {
		b, err := readFile(src.Tests, policycheck.MaxFileBytes)
		if err != nil {
			return err
		}
		body := strings.ReplaceAll(string(b), "\r\n", "\n")
		tests = &body
		tsum := sha256.Sum256(b)
		files += hex.EncodeToString(tsum[:])
	}
	current, err := s.currentNumber(ctx)
	if err != nil {
		return err
	}
	if files == f.synced.files && current == f.synced.version {
		st.Version = current // nothing changed since it was applied
		return nil
	}
	if err := s.syncFile(ctx, src, doc, tests, st); err != nil {
		return err
	}
	f.synced.files, f.synced.version = files, st.Version
	return nil
}

// currentNumber is the current version's number, read alone when the
// store can.
func (s *Service) currentNumber(ctx context.Context) (int64, error) {
	if n, ok := s.store.(numberer); ok {
		return n.CurrentNumber(ctx)
	}
	cur, err := s.Current(ctx)
	return cur.Number, err
}

// syncFile makes the file's policy and tests (nil: none) the current
// version and the saved tests, saving what differs.
func (s *Service) syncFile(ctx context.Context, src FileSource, doc []byte, tests *string, st *FileStatus) error {
	norm, err := Validate(doc)
	if err != nil {
		return fmt.Errorf("%s: %w", src.Policy, err)
	}
	cur, err := s.Current(ctx)
	if err != nil {
		return err
	}
	saved, err := s.Tests(ctx)
	if err != nil {
		return err
	}
	sameTests := tests == nil || *tests == saved.Body
	switch {
	case string(cur.JSON) == string(norm) && sameTests:
		st.Version = cur.Number
		return nil
	case string(cur.JSON) == string(norm):
		if _, err := s.saveTests(ctx, SaveTestsRequest{Base: saved.Revision, Body: *tests, Author: FileAuthor}); err != nil {
			return fmt.Errorf("%s: %w", src.Tests, err)
		}
		st.Version = cur.Number
		s.log.Info("saved the tests from the policy tests file", "file", src.Tests)
		if src.OnSave != nil {
			src.OnSave(cur, true)
		}
		return nil
	}
	v, err := s.save(ctx, SaveRequest{Base: cur.Number, JSON: doc, Author: FileAuthor, Tests: tests,
		Message: fmt.Sprintf("from %s (sha256 %s)", filepath.Base(src.Policy), st.SHA256[:12])}, true)
	if err != nil {
		return fmt.Errorf("%s: %w", src.Policy, err)
	}
	st.Version = v.Number
	if src.OnSave != nil {
		src.OnSave(v, false)
	}
	return nil
}

// readFile reads at most limit bytes of path, refusing a larger file.
func readFile(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is over %d bytes", path, limit)
	}
	return b, nil
}
