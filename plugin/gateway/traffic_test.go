package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

func TestDemoTrafficMixesIdentities(t *testing.T) {
	var mu sync.Mutex
	keys := map[string]int{}
	paths := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys[r.Header.Get("X-Api-Key")]++
		paths[r.URL.Path]++
		mu.Unlock()
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	demoTraffic(ctx, srv.URL, 100)

	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, n := range keys {
		total += n
	}
	if total < 10 {
		t.Fatalf("only %d requests in 400ms at 100 rps", total)
	}
	if keys["sk_live_noisy_client"] < total/4 {
		t.Errorf("noisy key sent %d of %d requests, want about a third", keys["sk_live_noisy_client"], total)
	}
	if keys["sk_live_enterprise"] == 0 || keys[""] == 0 || paths["/ip/items"] == 0 {
		t.Errorf("mix lacks a kind of request: keys %v paths %v", keys, paths)
	}
}

func TestDemoTrafficOffWhenRateIsZero(t *testing.T) {
	done := make(chan struct{})
	go func() { demoTraffic(context.Background(), "http://127.0.0.1:1", 0); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("demoTraffic with rps 0 should return at once")
	}
}
