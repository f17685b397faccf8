package web

import "strconv"

func itoa(n int) string         { return strconv.Itoa(n) }
func i64(n int64) string        { return strconv.FormatInt(n, 10) }
func versionURL(n int64) string { return "/history/" + i64(n) }
