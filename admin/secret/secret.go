// Package secret holds the rules every secret the admin accepts or makes
// follows: the admin token, the telemetry token, session ids and CSRF
// tokens. It has no dependencies, so any admin package can use it.
package secret

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"unicode"
)

// MinLen is the shortest secret accepted from a flag or the environment.
const MinLen = 16

// CheckStrength refuses a secret (named what in the error, e.g.
// "telemetry token") shorter than MinLen or with spaces or control
// characters.
func CheckStrength(what, token string) error {
	if len(token) < MinLen {
		return fmt.Errorf("the %s is %d characters long; use at least %d (or leave it empty to have one generated)", what, len(token), MinLen)
	}
	for _, r := range token {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return fmt.Errorf("the %s contains spaces or control characters; use printable characters only", what)
		}
	}
	return nil
}

// Random returns 256 random bits as 43 base64url characters.
func Random() string {
	var b [32]byte
	rand.Read(b[:]) // never returns an error (Go >= 1.24 aborts the process instead)
	return base64.RawURLEncoding.EncodeToString(b[:])
}
