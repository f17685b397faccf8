package migrate

// The converter of nginx configurations (nginx.go): its tokenizer and
// parser, which follow nginx's own (ngx_conf_read_token).

import (
	"strconv"
	"strings"
)

// ngxDirective is one directive: "name args;" or "name args { block }".
type ngxDirective struct {
	name    string
	args    []string
	line    ngxPos
	isBlock bool
	block   []*ngxDirective
}

// ngxPos is where a directive is: a line of the configuration given, or of
// a file it includes.
type ngxPos struct {
	file string // "" for the configuration given; an included file's name as its include found it
	n    int    // the line, from 1; 0 for none
}

// String is the position in a message: "line 12", or "line 12 of
// conf.d/api.conf" in an included file.
func (p ngxPos) String() string {
	if p.file == "" {
		return "line " + strconv.Itoa(p.n)
	}
	return "line " + strconv.Itoa(p.n) + " of " + p.file
}

// doc names the file of p in an error.
func (p ngxPos) doc() string {
	if p.file == "" {
		return nginxDoc
	}
	return p.file
}

// ngxLines lists positions: "lines 3, 7" in the configuration given,
// each in full ("line 3, line 4 of conf.d/api.conf") once a file it
// includes has some.
func ngxLines(ps []ngxPos) string {
	nums, full := make([]string, len(ps)), make([]string, len(ps))
	given := true // every position is in the configuration given
	for i, p := range ps {
		nums[i], full[i] = strconv.Itoa(p.n), p.String()
		given = given && p.file == ""
	}
	if !given {
		return strings.Join(full, ", ")
	}
	return "lines " + strings.Join(nums, ", ")
}

// known reports whether p is a position, not the zero value.
func (p ngxPos) known() bool { return p.n != 0 }

// Bounds on what the parser reads: real configurations nest http, server
// and a few locations, and hold thousands of directives at most.
const (
	ngxMaxDepth      = 32
	ngxMaxDirectives = 100000
)

type ngxToken int

const (
	ngxEOF    ngxToken = iota
	ngxSimple          // a directive ended by ";"
	ngxOpen            // a directive opening a block with "{"
	ngxClose           // "}"
)

// ngxLexer reads directives as nginx's ngx_conf_read_token does: words
// separated by spaces, ";" ending a directive and "{" opening a block
// (even inside a word), "#" starting a comment where a word could start,
// quoted words with backslash escapes, "${" kept in a word.
type ngxLexer struct {
	src        []byte
	file       string // ngxPos.file
	pos, line  int
	directives int
}

// parseNginxConf parses one file: file is "" for the configuration given,
// else the included file's name.
func parseNginxConf(src []byte, file string) ([]*ngxDirective, error) {
	l := &ngxLexer{src: src, file: file, line: 1}
	return l.block(0)
}

func (l *ngxLexer) errorf(format string, args ...any) error {
	return lineErr(ngxPos{l.file, l.line}, format, args...)
}

func (l *ngxLexer) block(depth int) ([]*ngxDirective, error) {
	var out []*ngxDirective
	for {
		args, line, tok, err := l.next()
		if err != nil {
			return nil, err
		}
		switch tok {
		case ngxEOF:
			if depth > 0 {
				return nil, l.errorf("unexpected end of file, expecting }")
			}
			return out, nil
		case ngxClose:
			if depth == 0 {
				return nil, l.errorf("unexpected }")
			}
			return out, nil
		}
		if l.directives++; l.directives > ngxMaxDirectives {
			return nil, l.errorf("more than %d directives; convert the part of the configuration that holds the limits", ngxMaxDirectives)
		}
		d := &ngxDirective{name: args[0], args: args[1:], line: ngxPos{l.file, line}}
		if tok == ngxOpen {
			if depth+1 > ngxMaxDepth {
				return nil, l.errorf("blocks nested more than %d deep", ngxMaxDepth)
			}
			d.isBlock = true
			if d.block, err = l.block(depth + 1); err != nil {
				return nil, err
			}
		}
		out = append(out, d)
	}
}

func ngxSpace(ch byte) bool { return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n' }

// next reads one directive's words up to its ";" or "{", or a "}".
func (l *ngxLexer) next() (args []string, line int, tok ngxToken, err error) {
	var (
		start                                        int
		lastSpace                                    = true
		needSpace, quoted, dq, sq, variable, comment bool
	)
	for l.pos < len(l.src) {
		ch := l.src[l.pos]
		l.pos++
		if ch == '\n' {
			l.line++
			comment = false
		}
		if comment {
			continue
		}
		if quoted {
			quoted = false
			continue
		}
		if needSpace { // after a closing quote
			switch {
			case ngxSpace(ch):
				lastSpace, needSpace = true, false
				continue
			case ch == ';':
				return args, line, ngxSimple, nil
			case ch == '{':
				return args, line, ngxOpen, nil
			case ch == ')':
				lastSpace, needSpace = true, false
			default:
				return nil, 0, 0, l.errorf("unexpected %s after a quoted word", ngxChar(ch))
			}
		}
		if lastSpace {
			start = l.pos - 1
			if ngxSpace(ch) {
				continue
			}
			switch ch {
			case ';', '{':
				if len(args) == 0 {
					return nil, 0, 0, l.errorf("unexpected %c", ch)
				}
				if ch == '{' {
					return args, line, ngxOpen, nil
				}
				return args, line, ngxSimple, nil
			case '}':
				if len(args) > 0 {
					return nil, 0, 0, l.errorf("unexpected } (a ; is missing before it)")
				}
				return nil, l.line, ngxClose, nil
			case '#':
				comment = true
				continue
			case '\\':
				quoted = true
			case '"':
				start++
				dq = true
			case '\'':
				start++
				sq = true
			case '$':
				variable = true
			}
			if len(args) == 0 {
				line = l.line
			}
			lastSpace = false
			continue
		}
		if ch == '{' && variable {
			continue
		}
		variable = false
		switch {
		case ch == '\\':
			quoted = true
			continue
		case ch == '$':
			variable = true
			continue
		}
		found := false
		switch {
		case dq:
			if ch == '"' {
				dq, needSpace, found = false, true, true
			}
		case sq:
			if ch == '\'' {
				sq, needSpace, found = false, true, true
			}
		case ngxSpace(ch) || ch == ';' || ch == '{':
			lastSpace, found = true, true
		}
		if !found {
			continue
		}
		args = append(args, ngxUnescape(l.src[start:l.pos-1]))
		switch ch {
		case ';':
			return args, line, ngxSimple, nil
		case '{':
			return args, line, ngxOpen, nil
		}
	}
	if len(args) > 0 || !lastSpace {
		return nil, 0, 0, l.errorf("unexpected end of file, expecting ; or }")
	}
	return nil, l.line, ngxEOF, nil
}

func ngxChar(ch byte) string {
	if ch > ' ' && ch < 0x7f {
		return string(ch)
	}
	return strconv.QuoteRune(rune(ch))
}

// ngxUnescape turns \" \' \\ \t \r \n into their characters, as nginx
// does; any other backslash stays.
func ngxUnescape(b []byte) string {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] == '\\' && i+1 < len(b) {
			switch b[i+1] {
			case '"', '\'', '\\':
				i++
			case 't':
				out, i = append(out, '\t'), i+1
				continue
			case 'r':
				out, i = append(out, '\r'), i+1
				continue
			case 'n':
				out, i = append(out, '\n'), i+1
				continue
			}
		}
		out = append(out, b[i])
	}
	return string(out)
}
