package web

import "net/url"

// manifestURL links a manifest page or download, keeping the format and
// the form's target.
func manifestURL(path, format, target string) string {
	q := url.Values{}
	if format != "" {
		q.Set("format", format)
	}
	if target != "" {
		q.Set("target", target)
	}
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}
