package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// SecretMask replaces a literal telemetry.token wherever the admin shows a
// configuration. It is itself a valid token (printable ASCII), so a masked
// configuration still parses: it can be validated, diffed and saved back,
// and RestoreSecrets then puts the stored token back in its place.
const SecretMask = "********"

// secretPaths are the secret fields of a configuration, as (object, field)
// at the top level. One today: a literal telemetry token.
var secretPaths = [][2]string{{"telemetry", "token"}}

// span is the byte range of a JSON string value in a document, quotes
// included.
type span struct{ start, end int }

// MaskSecrets returns doc with the value of every secret field replaced by
// SecretMask, leaving every other byte as it was (layout, order, other
// fields), so that line numbers of errors and diffs still match. A
// document that is not valid JSON is returned with every secret it could
// locate before the error masked; the admin only renders documents it
// parsed.
func MaskSecrets(doc []byte) []byte {
	spans, _ := secretSpans(doc)
	if len(spans) == 0 {
		return doc
	}
	mask, _ := json.Marshal(SecretMask)
	return replaceSpans(doc, spans, mask)
}

// HasMaskedSecret reports whether a secret field of doc holds SecretMask.
func HasMaskedSecret(doc []byte) bool {
	spans, _ := secretSpans(doc)
	for _, s := range spans {
		var v string
		if json.Unmarshal(doc[s.start:s.end], &v) == nil && v == SecretMask {
			return true
		}
	}
	return false
}

// RestoreSecrets returns doc with every secret field that holds SecretMask
// replaced by the same field's value in stored (the version the edit was
// based on), so that saving a configuration shown masked keeps its secret.
// A masked field with nothing to restore is a FieldError at its path.
func RestoreSecrets(doc, stored []byte) ([]byte, error) {
	spans, _ := secretSpans(doc)
	var masked []span
	for _, s := range spans {
		var v string
		if json.Unmarshal(doc[s.start:s.end], &v) == nil && v == SecretMask {
			masked = append(masked, s)
		}
	}
	if len(masked) == 0 {
		return doc, nil
	}
	old, _ := secretSpans(stored)
	if len(old) == 0 {
		return nil, Errors{{Path: "telemetry.token", Message: SecretMask + ` stands for the stored token, but the version this ` +
			`edit is based on has none; set "token_env" (recommended) or enter the token`}}
	}
	value := stored[old[0].start:old[0].end]
	var v string
	if json.Unmarshal(value, &v) != nil || v == SecretMask {
		return nil, Errors{{Path: "telemetry.token", Message: "the stored token cannot be restored; enter it again or use token_env"}}
	}
	return replaceSpans(doc, masked, value), nil
}

func replaceSpans(doc []byte, spans []span, with []byte) []byte {
	var out bytes.Buffer
	out.Grow(len(doc))
	last := 0
	for _, s := range spans {
		out.Write(doc[last:s.start])
		out.Write(with)
		last = s.end
	}
	out.Write(doc[last:])
	return out.Bytes()
}

// secretSpans locates the string values of the secret fields of doc (every
// occurrence, duplicates included), in order.
func secretSpans(doc []byte) ([]span, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	var spans []span
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return spans, err
		}
		fields := secretFields(key)
		if fields == nil {
			if err := skipValue(dec); err != nil {
				return spans, err
			}
			continue
		}
		found, err := stringFields(dec, doc, fields)
		spans = append(spans, found...)
		if err != nil {
			return spans, err
		}
	}
	return spans, nil
}

// secretFields returns the secret field names of the top-level object key.
func secretFields(key json.Token) []string {
	var fields []string
	for _, p := range secretPaths {
		if key == p[0] {
			fields = append(fields, p[1])
		}
	}
	return fields
}

// stringFields reads one value; if it is an object, it returns the spans of
// its string members named in fields.
func stringFields(dec *json.Decoder, doc []byte, fields []string) ([]span, error) {
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		if err == nil {
			err = skipRest(dec, tok)
		}
		return nil, err
	}
	var spans []span
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return spans, err
		}
		afterKey := int(dec.InputOffset())
		name, _ := key.(string)
		want := false
		for _, f := range fields {
			want = want || f == name
		}
		if !want {
			if err := skipValue(dec); err != nil {
				return spans, err
			}
			continue
		}
		v, err := dec.Token()
		if err != nil {
			return spans, err
		}
		if _, ok := v.(string); !ok {
			if err := skipRest(dec, v); err != nil {
				return spans, err
			}
			continue
		}
		end := int(dec.InputOffset())
		// The value starts at the first quote after the key's colon.
		colon := bytes.IndexByte(doc[afterKey:end], ':')
		quote := bytes.IndexByte(doc[afterKey+colon:end], '"')
		if colon < 0 || quote < 0 {
			return spans, errors.New("cannot locate the value")
		}
		spans = append(spans, span{afterKey + colon + quote, end})
	}
	_, err = dec.Token() // '}'
	return spans, err
}

// skipValue reads and discards one value.
func skipValue(dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	return skipRest(dec, tok)
}

// skipRest discards the rest of a value whose first token was tok.
func skipRest(dec *json.Decoder, tok json.Token) error {
	d, ok := tok.(json.Delim)
	if !ok || (d != '{' && d != '[') {
		return nil
	}
	for depth := 1; depth > 0; {
		t, err := dec.Token()
		if err == io.EOF {
			return io.ErrUnexpectedEOF
		}
		if err != nil {
			return err
		}
		if d, ok := t.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
		}
	}
	return nil
}
