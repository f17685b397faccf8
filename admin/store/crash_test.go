package store

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// crashChildEnv makes the test binary act as the crash test's child: it
// appends versions to the store in the named directory (or PostgreSQL
// URL) forever, printing "ack N" after each Append returns.
const crashChildEnv = "SLUICE_STORE_CRASH_CHILD_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		os.Exit(crashChild(dir))
	}
	os.Exit(m.Run())
}

// crashPayload is version n's content: sizes vary so writes span pages.
func crashPayload(n int64) []byte {
	pad := strings.Repeat(strconv.FormatInt(n%10, 10), 500+int(n*7919%40000))
	return fmt.Appendf(nil, `{"n":%d,"pad":%q}`, n, pad)
}

// openWhere opens the SQLite store in a directory or the PostgreSQL one at a URL.
func openWhere(ctx context.Context, where string) (*Store, error) {
	if IsPostgresURL(where) {
		return OpenPostgres(ctx, where)
	}
	return Open(ctx, where)
}

func crashChild(where string) int {
	ctx := context.Background()
	s, err := openWhere(ctx, where)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	base, err := s.CurrentNumber(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	deadline := time.Now().Add(time.Minute) // never outlive a broken parent for long
	for time.Now().Before(deadline) {
		n := base + 1
		if _, err := s.Append(ctx, base, NewVersion{JSON: crashPayload(n), Author: "child", Message: "m" + strconv.FormatInt(n, 10)}); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 3
		}
		// Unbuffered: the parent sees the ack only after Append returned.
		if _, err := fmt.Fprintf(os.Stdout, "ack %d\n", n); err != nil {
			return 4
		}
		base = n
	}
	return 0
}

// TestKillMidWrite runs the store in a child process that saves versions in
// a loop, kills it with SIGKILL at varying points, and checks after each
// kill that the database opens, passes integrity_check and holds every
// acknowledged version intact, numbered without gaps.
func TestKillMidWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns child processes")
	}
	killMidWrite(t, t.TempDir())
}

// killMidWrite runs the crash test on the store at where (a directory or
// a PostgreSQL URL).
func killMidWrite(t *testing.T, dir string) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var lastAck int64
	for round, acksBeforeKill := range []int{15, 40, 7, 25} {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		acks := 0
		for acks < acksBeforeKill && sc.Scan() {
			n, err := strconv.ParseInt(strings.TrimPrefix(sc.Text(), "ack "), 10, 64)
			if err != nil || n != lastAck+1 {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("round %d: child said %q after ack %d (%v)", round, sc.Text(), lastAck, err)
			}
			lastAck = n
			acks++
		}
		// Kill while the child is in its next Append (it never pauses).
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		// Acks the child wrote before it died may still sit in the pipe:
		// read them (to EOF, before Wait closes the pipe), since each is a
		// version the store acknowledged.
		for sc.Scan() {
			if n, err := strconv.ParseInt(strings.TrimPrefix(sc.Text(), "ack "), 10, 64); err == nil && n > lastAck {
				lastAck = n
			}
		}
		cmd.Wait()
		if IsPostgresURL(dir) {
			waitForDeadSessions(t, dir)
		}
		if acks < acksBeforeKill {
			t.Fatalf("round %d: child stopped after %d acks: %s", round, acks, stderr.String())
		}

		s, err := openWhere(context.Background(), dir)
		if err != nil {
			t.Fatalf("round %d: reopening after SIGKILL: %v", round, err)
		}
		if err := s.IntegrityCheck(context.Background()); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		cur, err := s.CurrentNumber(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		// The version being written when the kill landed may or may not
		// have committed; nothing acknowledged may be missing.
		if cur < lastAck || cur > lastAck+1 {
			t.Fatalf("round %d: current version %d after ack %d", round, cur, lastAck)
		}
		all, err := s.List(context.Background(), 0, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(all)) != cur {
			t.Fatalf("round %d: %d versions stored, current is %d: a gap", round, len(all), cur)
		}
		for _, v := range all {
			if string(v.JSON) != string(crashPayload(v.Number)) || v.Parent != v.Number-1 || v.Message != "m"+strconv.FormatInt(v.Number, 10) {
				t.Fatalf("round %d: version %d is damaged", round, v.Number)
			}
		}
		s.Close()
		lastAck = cur // the next child continues from what is stored
	}
}

// waitForDeadSessions waits until the killed child's PostgreSQL session has
// ended. The server notices a dead client only when it next reads from it,
// and may commit the child's last version meanwhile; checking, or starting
// the next child, before that would read a current version about to move.
func waitForDeadSessions(t *testing.T, url string) {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var others int
		err := db.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()`).Scan(&others)
		if err == nil && others == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the killed child's session is still open after 30 s (%d others, %v)", others, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
