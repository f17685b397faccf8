package web

import (
	"net/url"
	"strconv"
)

func itoa(n int) string         { return strconv.Itoa(n) }
func i64(n int64) string        { return strconv.FormatInt(n, 10) }
func versionURL(n int64) string { return "/history/" + i64(n) }

// userURL is the users page's form target for one user (the name escaped).
func userURL(name string) string { return "/users/" + url.PathEscape(name) }

// oidcLoginURL starts an OIDC login that returns to next (a local path).
func oidcLoginURL(next string) string { return "/login/oidc?next=" + url.QueryEscape(next) }
