package policy

import (
	"strconv"
	"strings"
)

// StatusSet is a set of HTTP response statuses from 100 to 599: the
// statuses a "response_status:<list>" cost source counts. It is a bit set,
// so that the filter tests a response's status with one shift, and two
// lists naming the same statuses ("401,4xx" and "4xx") are equal and
// normalize to the same text.
type StatusSet [8]uint64

// Status codes a StatusSet can hold.
const (
	minStatus = 100
	maxStatus = 599
)

// Has reports whether status is in the set; a status outside 100-599
// never is.
func (s *StatusSet) Has(status int) bool {
	i := status - minStatus
	if i < 0 || status > maxStatus {
		return false
	}
	return s[i>>6]&(1<<(i&63)) != 0
}

func (s *StatusSet) add(status int) { i := status - minStatus; s[i>>6] |= 1 << (i & 63) }

// String lists the set as configuration text: the statuses in ascending
// order, a class all of whose hundred statuses are in the set written
// "4xx".
func (s *StatusSet) String() string {
	var b strings.Builder
	for class := 1; class <= 5; class++ {
		n := 0
		for code := class * 100; code < class*100+100; code++ {
			if s.Has(code) {
				n++
			}
		}
		switch {
		case n == 100:
			sep(&b)
			b.WriteString(strconv.Itoa(class) + "xx")
		case n > 0:
			for code := class * 100; code < class*100+100; code++ {
				if s.Has(code) {
					sep(&b)
					b.WriteString(strconv.Itoa(code))
				}
			}
		}
	}
	return b.String()
}

func sep(b *strings.Builder) {
	if b.Len() > 0 {
		b.WriteByte(',')
	}
}

// parseStatusList reads a comma-separated list of statuses ("401", 100 to
// 599) and classes ("4xx", 1xx to 5xx). It returns a message naming the
// first bad item, or "".
func parseStatusList(list string) (StatusSet, string) {
	var s StatusSet
	if list == "" {
		return s, `names no status; list the statuses to count after "response_status:", such as "response_status:401,403" or "response_status:5xx"`
	}
	for _, item := range strings.Split(list, ",") {
		if msg := s.addItem(item); msg != "" {
			return StatusSet{}, msg
		}
	}
	return s, ""
}

// addItem adds one list item: a status or a class.
func (s *StatusSet) addItem(item string) string {
	const want = "; list statuses from 100 to 599 (401) or classes 1xx to 5xx (4xx), separated by commas without spaces"
	if len(item) != 3 || item[0] < '1' || item[0] > '5' {
		return quoteShort(item) + " is not a status" + want
	}
	class := int(item[0] - '0')
	if rest := strings.ToLower(item[1:]); rest == "xx" {
		for code := class * 100; code < class*100+100; code++ {
			s.add(code)
		}
		return ""
	}
	code, err := strconv.Atoi(item)
	if err != nil {
		return quoteShort(item) + " is not a status" + want
	}
	s.add(code)
	return ""
}

// ParseGRPCStatus reads a grpc-status value (1 or 2 digits), as the filter and the
// simulator read it; anything else
// is -1, a code no set holds.
func ParseGRPCStatus(v string) int {
	if n, ok := smallDecimal(v); ok && len(v) <= 2 {
		return n
	}
	return -1
}

// ParseStatus reads a three-digit :status; anything else is 0, a status no
// set holds.
func ParseStatus(v string) int {
	if n, ok := smallDecimal(v); ok && len(v) == 3 {
		return n
	}
	return 0
}

// smallDecimal reads 1 to 3 decimal digits.
func smallDecimal(v string) (int, bool) {
	if len(v) == 0 || len(v) > 3 {
		return 0, false
	}
	n := 0
	for _, c := range []byte(v) {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}
