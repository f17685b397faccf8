// Command hello stands in for a program in image tests that do not run
// it: a small static executable for any platform, quick to cross-compile.
package main

import "os"

func main() { os.Stdout.WriteString("hello\n") }
