package policy

import "strconv"

// telemetry parses the optional top-level "telemetry" object.
func (p *parser) telemetry(path string, v *jvalue) *Telemetry {
	if v.kind != jObject {
		p.errorf(path, `must be an object such as {"cluster": "sluice_admin", "token_env": "SLUICE_TELEMETRY_TOKEN"}, got `, v.kind.String())
		return nil
	}
	f := p.object(path, v, telemetryFields)
	t := &Telemetry{
		Authority:  DefaultTelemetryAuthority,
		Path:       DefaultTelemetryPath,
		IntervalMS: DefaultTelemetryInterval,
		TopN:       DefaultTelemetryTopN,
		TimeoutMS:  DefaultTelemetryTimeout,
	}
	str := func(name, what string, required bool) (string, bool) {
		return p.printable(path, f, name, what, required) // fleet.go
	}
	if s, ok := str("cluster", "the name of the Envoy cluster of the Sluice admin", true); ok {
		t.Cluster = s
	}
	if s, ok := str("authority", "the :authority of the reports (default "+DefaultTelemetryAuthority+")", false); ok {
		t.Authority = s
	}
	if s, ok := str("path", "the path of the admin's ingestion endpoint (default "+DefaultTelemetryPath+")", false); ok {
		if s[0] != '/' {
			p.errorf(join(path, "path"), "must start with /, e.g. ", DefaultTelemetryPath)
		} else {
			t.Path = s
		}
	}
	p.telemetryToken(path, f, t, str)
	if iv := f["interval_ms"]; iv != nil {
		if n, ok := p.integer(join(path, "interval_ms"), iv, MinTelemetryInterval, MaxTelemetryInterval,
			"an integer from "+strconv.Itoa(MinTelemetryInterval)+" to "+strconv.Itoa(MaxTelemetryInterval)+
				" (milliseconds between reports; default "+strconv.Itoa(DefaultTelemetryInterval)+")"); ok {
			t.IntervalMS = n
		}
	}
	if nv := f["top_n"]; nv != nil {
		if n, ok := p.integer(join(path, "top_n"), nv, 1, MaxTelemetryTopN,
			"an integer from 1 to "+strconv.Itoa(MaxTelemetryTopN)+" (the most buckets per report; default "+
				strconv.Itoa(DefaultTelemetryTopN)+")"); ok {
			t.TopN = n
		}
	}
	tp := join(path, "timeout_ms")
	if tv := f["timeout_ms"]; tv != nil {
		if n, ok := p.integer(tp, tv, 1, MaxTelemetryInterval-1,
			"an integer from 1 to "+strconv.Itoa(MaxTelemetryInterval-1)+" (milliseconds; default "+
				strconv.Itoa(DefaultTelemetryTimeout)+"), less than interval_ms"); ok {
			t.TimeoutMS = n
		} else {
			return t
		}
	}
	if t.TimeoutMS >= t.IntervalMS {
		p.errorf(tp, strconv.Itoa(t.TimeoutMS), " must be less than interval_ms (", strconv.Itoa(t.IntervalMS),
			") so that at most one report per VM is in flight")
	}
	return t
}

// telemetryToken reads exactly one of "token" (the secret itself) and
// "token_env" (the name of the VM environment variable holding it, so that
// the secret stays out of the policy). The token's value never appears in
// an error message.
func (p *parser) telemetryToken(path string, f map[string]*jvalue, t *Telemetry, str func(name, what string, required bool) (string, bool)) {
	tv, ev := f["token"], f["token_env"]
	switch {
	case tv == nil && ev == nil:
		p.errorf(join(path, "token_env"), `missing; set token_env to the VM environment variable holding the admin's telemetry token `+
			`(e.g. "SLUICE_TELEMETRY_TOKEN"), or token to the token itself`)
		return
	case tv != nil && ev != nil:
		p.errorf(join(path, "token"), "set only one of token and token_env (token_env names the VM environment variable holding the token)")
		return
	}
	if tv != nil {
		if s, ok := str("token", "the admin's telemetry token (sent as a bearer token)", true); ok {
			t.Token = s
		}
		return
	}
	if s, ok := str("token_env", "the VM environment variable holding the admin's telemetry token", true); ok {
		if !validEnvName(s) {
			p.errorf(join(path, "token_env"), strconv.Quote(s), " is not an environment variable name; use letters, digits and _, not starting with a digit (e.g. SLUICE_TELEMETRY_TOKEN)")
			return
		}
		t.TokenEnv = s
	}
}

// validEnvName reports whether s is a portable environment variable name:
// [A-Za-z_][A-Za-z0-9_]*, at most MaxEnvNameLen bytes.
func validEnvName(s string) bool {
	if s == "" || len(s) > MaxEnvNameLen || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}
