package web

import "strconv"

// plural formats a count with its noun: "1 node", "2 nodes", "3 matches".
func plural(n int, noun string) string {
	if n != 1 {
		switch noun[len(noun)-1] {
		case 'h', 's', 'x':
			noun += "es"
		default:
			noun += "s"
		}
	}
	return strconv.Itoa(n) + " " + noun
}
