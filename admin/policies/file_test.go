package policies

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const perKey = `{"rules":[{"name":"per-key","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}}]}`

// writeConfigMap writes files as a kubelet updates a mounted ConfigMap: a
// new directory, then the ..data link swapped to it, with each file a link
// through ..data.
func writeConfigMap(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	gen, err := os.MkdirTemp(dir, "..gen")
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(gen, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if link := filepath.Join(dir, name); !exists(link) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(gen), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// The policy follows its file: each change of the ConfigMap becomes one
// version, authored by git, reviewed or not; a look that finds nothing new
// saves nothing; every other change is refused naming the file.
func TestPolicyFollowsItsFile(t *testing.T) {
	ctx := context.Background()
	s, pub, _ := newService(t)
	s.SetReviewRequired(true) // the file's review was in Git
	dir := t.TempDir()
	writeConfigMap(t, dir, map[string]string{"policy.json": perIP})
	var saved []int64
	s.FollowFile(FileSource{Policy: filepath.Join(dir, "policy.json"), OnSave: func(v Version, _ bool) { saved = append(saved, v.Number) }})

	st := s.LookAtFile(ctx)
	cur, _ := s.Current(ctx)
	if st.Err != "" || st.Version != 2 || cur.Number != 2 || cur.Author != FileAuthor || !strings.HasPrefix(cur.Message, "from policy.json (sha256 ") {
		t.Fatalf("first look: %+v; current v%d by %s: %s", st, cur.Number, cur.Author, cur.Message)
	}
	if st := s.LookAtFile(ctx); st.Version != 2 || st.InSync.IsZero() {
		t.Errorf("a look at the same file: %+v", st)
	}
	writeConfigMap(t, dir, map[string]string{"policy.json": perKey})
	if st := s.LookAtFile(ctx); st.Version != 3 {
		t.Fatalf("after the ConfigMap changed: %+v", st)
	}
	if got := pub.numbers(); len(got) != 3 || got[2] != 3 || len(saved) != 2 {
		t.Errorf("published %v, saved %v", got, saved)
	}

	var me *ManagedError
	if _, err := s.Save(ctx, SaveRequest{Base: 3, JSON: []byte(perIP), Author: "alice"}); !errors.As(err, &me) ||
		!strings.Contains(err.Error(), "the policy follows "+filepath.Join(dir, "policy.json")+": change this policy there (in Git)") {
		t.Errorf("a save: %v", err)
	}
	if _, err := s.Rollback(ctx, RollbackRequest{To: 2, Base: 3, Author: "alice"}); !errors.As(err, &me) {
		t.Errorf("a rollback: %v", err)
	}
	if _, err := s.SaveTests(ctx, SaveTestsRequest{Body: "", Author: "alice"}); err != nil {
		t.Errorf("tests without a tests file are the admin's: %v", err)
	}
}

// A file that cannot be read, does not parse or fails the saved tests
// changes nothing: the current version stays, and the status says why.
func TestABadPolicyFileKeepsTheCurrentVersion(t *testing.T) {
	ctx := context.Background()
	s, pub, _ := newService(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.json")
	s.FollowFile(FileSource{Policy: path})
	if st := s.LookAtFile(ctx); !strings.Contains(st.Err, "no such file") || st.Version != 0 {
		t.Errorf("no file: %+v", st)
	}
	writeConfigMap(t, dir, map[string]string{"policy.json": perIP})
	if st := s.LookAtFile(ctx); st.Version != 2 {
		t.Fatalf("a good file: %+v", st)
	}
	writeConfigMap(t, dir, map[string]string{"policy.json": strings.Replace(perIP, `"burst":10`, `"burst":1`, 1)})
	st := s.LookAtFile(ctx)
	if !strings.Contains(st.Err, path+": ") || !strings.Contains(st.Err, "invalid configuration") || st.Version != 0 || st.InSync.IsZero() {
		t.Errorf("an invalid file: %+v", st)
	}
	tests := "tests:\n  - name: keyed\n    request: {headers: {x-api-key: k}}\n    expect: {status: 200, rule: per-key}\n"
	if _, err := s.SaveTests(ctx, SaveTestsRequest{Body: strings.Replace(tests, "per-key", "per-ip", 1), Author: "alice"}); err != nil {
		t.Fatal(err)
	}
	writeConfigMap(t, dir, map[string]string{"policy.json": perKey})
	if st := s.LookAtFile(ctx); !strings.Contains(st.Err, "fails 1 of 1 saved tests") {
		t.Errorf("a file failing the saved tests: %+v", st)
	}
	if got := pub.numbers(); len(got) != 2 {
		t.Errorf("published %v: a bad file was pushed", got)
	}
}

// With a tests file the tests follow it too: saved with the policy they
// check, or alone when only they changed; the Tests page cannot change them.
func TestTestsFollowTheirFileWithThePolicy(t *testing.T) {
	ctx := context.Background()
	s, _, _ := newService(t)
	dir := t.TempDir()
	tests := "tests:\n  - name: keyed\n    request: {headers: {x-api-key: k}}\n    expect: {status: 200, rule: per-key}\n"
	writeConfigMap(t, dir, map[string]string{"policy.json": perKey, "policy.tests.yaml": tests})
	s.FollowFile(FileSource{Policy: filepath.Join(dir, "policy.json"), Tests: filepath.Join(dir, "policy.tests.yaml")})
	if st := s.LookAtFile(ctx); st.Err != "" || st.Version != 2 {
		t.Fatalf("first look: %+v", st)
	}
	if got, _ := s.Tests(ctx); got.Body != tests || got.Author != FileAuthor {
		t.Errorf("saved tests %+v", got)
	}
	more := tests + "  - name: anonymous\n    request: {}\n    expect: {status: 200}\n"
	writeConfigMap(t, dir, map[string]string{"policy.json": perKey, "policy.tests.yaml": more})
	if st := s.LookAtFile(ctx); st.Err != "" || st.Version != 2 {
		t.Fatalf("only the tests changed: %+v", st)
	}
	if got, _ := s.Tests(ctx); got.Body != more || got.Revision != 2 {
		t.Errorf("saved tests %+v", got)
	}
	var me *ManagedError
	if _, err := s.SaveTests(ctx, SaveTestsRequest{Base: 2, Body: "", Author: "alice"}); !errors.As(err, &me) || !strings.Contains(err.Error(), "change the tests there") {
		t.Errorf("a tests save: %v", err)
	}
	// A policy and tests that fail together are refused together.
	writeConfigMap(t, dir, map[string]string{"policy.json": perIP, "policy.tests.yaml": more})
	if st := s.LookAtFile(ctx); !strings.Contains(st.Err, "fails") {
		t.Errorf("a policy its own tests fail: %+v", st)
	}
}

// Two admins sharing a database follow the same file: one saves it, the
// other finds it saved, and neither saves it twice.
func TestReplicasFollowingOneFileSaveItOnce(t *testing.T) {
	ctx := context.Background()
	a, _, st := newService(t)
	b := New(st, &recorder{}, nil)
	if _, err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeConfigMap(t, dir, map[string]string{"policy.json": perKey})
	for _, s := range []*Service{a, b} {
		s.FollowFile(FileSource{Policy: filepath.Join(dir, "policy.json")})
	}
	done := make(chan FileStatus)
	for _, s := range []*Service{a, b} {
		go func() { done <- s.LookAtFile(ctx) }()
	}
	for range 2 {
		if st := <-done; st.Err != "" || st.Version != 2 {
			t.Errorf("a replica's look: %+v", st)
		}
	}
	if cur, _ := a.Current(ctx); cur.Number != 2 {
		t.Errorf("current v%d, want the file saved once as v2", cur.Number)
	}
}

// A version saved behind the file's back (an admin that does not follow
// it, sharing the database) is replaced by the file at the next look, even
// though the file did not change.
func TestAVersionSavedBehindTheFilesBackIsReplaced(t *testing.T) {
	ctx := context.Background()
	s, _, st := newService(t)
	dir := t.TempDir()
	writeConfigMap(t, dir, map[string]string{"policy.json": perKey})
	s.FollowFile(FileSource{Policy: filepath.Join(dir, "policy.json")})
	if got := s.LookAtFile(ctx); got.Version != 2 {
		t.Fatalf("first look: %+v", got)
	}
	other := New(st, &recorder{}, nil) // follows no file
	if _, err := other.Save(ctx, SaveRequest{Base: 2, JSON: []byte(perIP), Author: "bob"}); err != nil {
		t.Fatal(err)
	}
	if got := s.LookAtFile(ctx); got.Err != "" || got.Version != 4 {
		t.Fatalf("the look after another admin's save: %+v", got)
	}
	if cur, _ := s.Current(ctx); cur.Author != FileAuthor {
		t.Errorf("current v%d by %s, want the file's content again", cur.Number, cur.Author)
	}
}
