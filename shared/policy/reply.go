package policy

import (
	"encoding/json"
	"strconv"
	"strings"
)

// This file parses "reject_body" and "reject_content_type": the body a
// rejection is sent with instead of the filter's JSON, at the top level
// (every limit rule's rejections) or on a rule (its own rejections, a deny
// rule's included). Teams moving from Kong (error_message), Higress
// (rejected_msg) or an nginx error page keep what their clients parse.

// Bounds of a custom reply.
const (
	// MaxRejectBody bounds reject_body in bytes: a rejection is sent often,
	// and under load; a page of text is plenty.
	MaxRejectBody = 4096
	// maxContentType bounds reject_content_type in bytes.
	maxContentType = 256
	// ContentTypeJSON and ContentTypeText are reject_content_type's
	// defaults: JSON for a body that is JSON, text otherwise.
	ContentTypeJSON = "application/json"
	ContentTypeText = "text/plain; charset=utf-8"
)

// Reply is a custom rejection reply.
type Reply struct {
	Body string
	// ContentType is sent as content-type; "" (an empty body without
	// reject_content_type) sends none.
	ContentType string
}

// defaultContentType is the content type of body when reject_content_type
// is not given: none for an empty body, JSON for a JSON text, else text.
func defaultContentType(body string) string {
	switch {
	case body == "":
		return ""
	case json.Valid([]byte(body)):
		return ContentTypeJSON
	}
	return ContentTypeText
}

// RejectReply is the custom reply a rejection by r is sent with, or nil for
// the filter's own JSON body: the rule's, else (for a limit rule) the
// configuration's.
func (c *Config) RejectReply(r *Rule) *Reply {
	if r.Reply != nil || r.Action != ActionLimit {
		return r.Reply
	}
	return c.Reply
}

// reply reads "reject_body" and "reject_content_type" of the object at path.
func (p *parser) reply(path string, f map[string]*jvalue) *Reply {
	bv, cv := f["reject_body"], f["reject_content_type"]
	if bv == nil {
		if cv != nil {
			p.errorf(join(path, "reject_content_type"), `needs "reject_body" beside it; the filter's own body is JSON, sent as application/json`)
		}
		return nil
	}
	bpath := join(path, "reject_body")
	switch {
	case bv.kind != jString:
		p.errorf(bpath, `must be a string (the body sent with a rejection, such as "{\"message\": \"API rate limit exceeded\"}"), got `, bv.kind.String())
		return nil
	case len(bv.s) > MaxRejectBody:
		p.errorf(bpath, "is ", strconv.Itoa(len(bv.s)), " bytes long; at most ", strconv.Itoa(MaxRejectBody), " are allowed")
		return nil
	}
	r := &Reply{Body: bv.s, ContentType: defaultContentType(bv.s)}
	if cv != nil {
		cpath := join(path, "reject_content_type")
		if cv.kind != jString {
			p.errorf(cpath, `must be a string such as "text/plain; charset=utf-8", got `, cv.kind.String())
			return nil
		}
		if msg := checkContentType(cv.s); msg != "" {
			p.errorf(cpath, msg)
			return nil
		}
		r.ContentType = cv.s
	}
	return r
}

// checkContentType accepts a media type with optional parameters, in
// printable ASCII: a header value Envoy sends as given.
func checkContentType(s string) string {
	const example = `; use a media type such as "text/plain; charset=utf-8" or "application/problem+json"`
	switch {
	case s == "":
		return "is empty" + example
	case len(s) > maxContentType:
		return "is longer than " + strconv.Itoa(maxContentType) + " bytes"
	case s[0] == ' ' || s[len(s)-1] == ' ':
		return "starts or ends with a space" + example
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return quoteShort(s) + " contains " + quoteByte(s, i) + "; a content type is printable ASCII"
		}
	}
	typ, _, _ := strings.Cut(s, ";")
	major, minor, ok := strings.Cut(strings.TrimSpace(typ), "/")
	if !ok || !isToken(major) || !isToken(minor) {
		return quoteShort(s) + " is not type/subtype" + example
	}
	return ""
}

func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			return false
		}
	}
	return s != ""
}
