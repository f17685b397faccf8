package bodyscan

import (
	"strconv"
	"strings"
	"testing"
)

// openAIStream is a streamed chat completion of n content chunks, usage in
// the last event.
func openAIStream(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteString(`data: {"id":"chatcmpl-9","object":"chat.completion.chunk","created":1732752000,"model":"gpt-4o-mini",` +
			`"choices":[{"index":0,"delta":{"content":" token` + strconv.Itoa(i) + `"},"finish_reason":null}],"usage":null}` + "\n\n")
	}
	b.WriteString(`data: {"id":"chatcmpl-9","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":` + strconv.Itoa(n) + `,"total_tokens":` + strconv.Itoa(n+12) + "}}\n\ndata: [DONE]\n\n")
	return b.String()
}

// completion is a chat completion answer whose content is n bytes.
func completion(n int) string {
	return `{"id":"chatcmpl-9","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Repeat(`lorem ipsum \"dolor\" sit amet `, n/30) + `"},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":12,"completion_tokens":300,"total_tokens":312}}`
}

// BenchmarkScanner is the scan of a whole body, natively (bytes/s in MB/s).
// The body is written in chunks of 1 KiB, as a proxy receives it.
func BenchmarkScanner(b *testing.B) {
	paths, _ := ParsePaths("usage.total_tokens")
	for _, c := range []struct {
		name   string
		format Format
		body   string
	}{
		{"events/chunks=200", EventStream, openAIStream(200)},
		{"json/content=16KiB", JSON, completion(16 << 10)},
	} {
		b.Run(c.name, func(b *testing.B) {
			body := []byte(c.body)
			b.SetBytes(int64(len(body)))
			var s Scanner
			for i := 0; i < b.N; i++ {
				s.Reset(paths, c.format)
				for off := 0; off < len(body); off += 1024 {
					s.Write(body[off:min(off+1024, len(body))])
				}
				s.Close()
				if _, out := s.Result(); out != Found {
					b.Fatalf("outcome %v", out)
				}
			}
		})
	}
}
