package envoyhost

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"

	"github.com/sluice-rl/sluice/plugin/scenario"
)

// The line protocol of cpphost/main.cc: "<tag> <command> <token>..." in,
// "<tag> ok <token>..." or "<tag> err <message>" out. In a token every byte
// outside 0x21-0x7e and '%' is written %XX; the empty string is a lone "%".

func esc(s string) string {
	if s == "" {
		return "%"
	}
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= 0x20 || c >= 0x7f || c == '%' {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= 0x20 || c >= 0x7f || c == '%' {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

func unesc(s string) (string, error) {
	if s == "%" {
		return "", nil
	}
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("truncated escape in %q", s)
		}
		n, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", fmt.Errorf("bad escape in %q", s)
		}
		b.WriteByte(byte(n))
		i += 2
	}
	return b.String(), nil
}

// line builds the arguments of a command.
type line []string

func (l *line) str(s string) { *l = append(*l, esc(s)) }
func (l *line) num(n int64)  { *l = append(*l, strconv.FormatInt(n, 10)) }
func (l *line) headers(h []scenario.Header) {
	l.num(int64(len(h)))
	for _, kv := range h {
		l.str(kv[0])
		l.str(kv[1])
	}
}

// tokens reads the values of an answer in order.
type tokens struct {
	t   []string
	err error
}

func (t *tokens) str() string {
	if t.err != nil {
		return ""
	}
	if len(t.t) == 0 {
		t.err = errors.New("envoyhost: short answer from the host program")
		return ""
	}
	s, err := unesc(t.t[0])
	t.t = t.t[1:]
	if err != nil {
		t.err = err
	}
	return s
}

func (t *tokens) num() int64 {
	s := t.str()
	if t.err != nil {
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.err = fmt.Errorf("envoyhost: expected a number from the host program, got %q", s)
	}
	return n
}

func (t *tokens) headers() []scenario.Header {
	n := t.num()
	if n < 0 {
		return nil
	}
	h := make([]scenario.Header, 0, n)
	for i := int64(0); i < n && t.err == nil; i++ {
		h = append(h, scenario.Header{t.str(), t.str()})
	}
	return h
}

type answer struct {
	tok tokens
	err error
}

// client talks to one host program.
type client struct {
	cmd   *exec.Cmd
	label string

	wmu sync.Mutex
	in  io.WriteCloser

	mu      sync.Mutex
	next    uint64
	waiting map[uint64]chan answer
	dead    error

	stderr *tailBuffer
	done   chan struct{}
}

// tailBuffer keeps the last bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > 16<<10 {
		b.buf = append(b.buf[:0], b.buf[len(b.buf)-16<<10:]...)
	}
	b.mu.Unlock()
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.TrimSpace(string(b.buf))
}

func startClient(bin, label string) (*client, error) {
	c := &client{label: label, waiting: map[uint64]chan answer{}, stderr: &tailBuffer{}, done: make(chan struct{})}
	c.cmd = exec.Command(bin)
	c.cmd.Stderr = c.stderr
	in, err := c.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("envoyhost: starting %s: %v", bin, err)
	}
	c.in = in
	go c.read(out)
	return c, nil
}

func (c *client) read(out io.Reader) {
	r := bufio.NewReaderSize(out, 1<<16)
	var readErr error
	for {
		s, err := r.ReadString('\n')
		if err != nil {
			readErr = err
			break
		}
		f := strings.Split(strings.TrimSuffix(s, "\n"), " ")
		if len(f) < 2 {
			continue
		}
		tag, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			continue
		}
		var a answer
		switch f[1] {
		case "ok":
			a.tok = tokens{t: f[2:]}
		case "err":
			msg := ""
			if len(f) > 2 {
				msg, _ = unesc(f[2])
			}
			a.err = fmt.Errorf("%s: %s", c.label, msg)
		default:
			a.err = fmt.Errorf("%s: unexpected answer %q", c.label, s)
		}
		c.mu.Lock()
		ch := c.waiting[tag]
		delete(c.waiting, tag)
		c.mu.Unlock()
		if ch != nil {
			ch <- a
		}
	}
	waitErr := c.cmd.Wait()
	c.mu.Lock()
	msg := fmt.Sprintf("%s: the host program ended (%v", c.label, readErr)
	if waitErr != nil {
		msg += ", " + waitErr.Error()
	}
	msg += ")"
	if tail := c.stderr.String(); tail != "" {
		msg += "; its stderr:\n" + tail
	}
	c.dead = errors.New(msg)
	for tag, ch := range c.waiting {
		ch <- answer{err: c.dead}
		delete(c.waiting, tag)
	}
	c.mu.Unlock()
	close(c.done)
}

// send writes one command and returns where its answer will arrive.
func (c *client) send(cmd string, args line) <-chan answer {
	ch := make(chan answer, 1)
	c.mu.Lock()
	if c.dead != nil {
		c.mu.Unlock()
		ch <- answer{err: c.dead}
		return ch
	}
	c.next++
	tag := c.next
	c.waiting[tag] = ch
	c.mu.Unlock()
	var b strings.Builder
	b.WriteString(strconv.FormatUint(tag, 10))
	b.WriteByte(' ')
	b.WriteString(cmd)
	for _, a := range args {
		b.WriteByte(' ')
		b.WriteString(a)
	}
	b.WriteByte('\n')
	c.wmu.Lock()
	_, err := io.WriteString(c.in, b.String())
	c.wmu.Unlock()
	if err != nil {
		c.mu.Lock()
		if _, still := c.waiting[tag]; still {
			delete(c.waiting, tag)
			ch <- answer{err: fmt.Errorf("%s: writing to the host program: %v", c.label, err)}
		}
		c.mu.Unlock()
	}
	return ch
}

func (c *client) call(cmd string, args line) (*tokens, error) {
	a := <-c.send(cmd, args)
	if a.err != nil {
		return nil, a.err
	}
	return &a.tok, nil
}

func (c *client) kill() {
	_ = c.cmd.Process.Kill()
	<-c.done
}
