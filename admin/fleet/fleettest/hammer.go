package fleettest

import (
	"context"
	"math"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
)

// RunFunc applies a batch of bucket operations (a backend's Run).
type RunFunc func(ctx context.Context, ops []redisgcra.Op) ([]redisgcra.Outcome, error)

// HammerWindow is how long Hammer runs, in real time: long enough for the
// bucket to refill many times over, short for CI.
const HammerWindow = 1500 * time.Millisecond

// Hammer runs goroutines taking 1 to 3 tokens (each op a batch across
// keys) from buckets of rate 100/s and burst 100 for HammerWindow; every
// second goroutine gives one token of each grant of 2 or 3 back at once
// (once the bucket is drained, so that a return never meets a full
// bucket). Then it checks per key, with t the span of the backend's clock between
// the key's first and last call and net = admitted - returned:
//
//	net <= burst + rate*t                             (never over, exactly)
//	net + headroom(end) ~= tau*rate + rate*(t - full)  (nothing lost, returns credited)
//
// where the second holds up to the rounding of each call (< 1 us), and
// full is the time the bucket spent full after the first call (refill
// that nobody could take: on a loaded machine every caller may be held
// up at once), read from the outcomes replayed in the backend's order.
//
// A failed call fails the test: the backend must give every caller an
// answer.
func Hammer(t *testing.T, run RunFunc, keys []string, goroutines int) {
	t.Helper()
	limit := redisgcra.Limit{Rate: 100, Burst: 100}
	type tally struct {
		admitted, returned                uint64
		calls, admittedCalls, returnCalls uint64
		first, last                       int64
		events                            []event
	}
	var mu sync.Mutex
	tallies := make([]tally, len(keys))
	for i := range tallies {
		tallies[i].first = math.MaxInt64
	}
	ctx := context.Background()
	stop := time.Now().Add(HammerWindow)
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			for i := 0; time.Now().Before(stop); i++ {
				n := uint64(1 + (g+i)%3)
				ops := make([]redisgcra.Op, len(keys))
				for k, key := range keys {
					ops[k] = redisgcra.Op{Key: key, Amount: limit.Cost(n), Tau: limit.Tau()}
				}
				outs, err := run(ctx, ops)
				if err != nil {
					errs <- err
					return
				}
				var back []redisgcra.Op
				var backKeys []int
				mu.Lock()
				for k, o := range outs {
					tl := &tallies[k]
					tl.calls++
					tl.first, tl.last = min(tl.first, o.Now), max(tl.last, o.Now)
					tl.events = append(tl.events, event{o.Now, o.Now + o.Backlog})
					if o.Allowed {
						tl.admitted += n
						tl.admittedCalls++
						if g%2 == 0 && n >= 2 && o.Backlog > limit.Tau()/2 {
							back = append(back, redisgcra.Op{Key: keys[k], Amount: limit.Credit(1), Tau: limit.Tau(), Return: true})
							backKeys = append(backKeys, k)
						}
					}
				}
				mu.Unlock()
				if len(back) == 0 {
					continue
				}
				outs, err = run(ctx, back)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for j, o := range outs {
					tl := &tallies[backKeys[j]]
					tl.returned++
					tl.returnCalls++
					tl.last = max(tl.last, o.Now)
					tl.events = append(tl.events, event{o.Now, o.Now + o.Backlog})
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for k, key := range keys {
		tl := tallies[k]
		// A zero-token take reads the headroom at the end without changing it.
		end, err := run(ctx, []redisgcra.Op{{Key: key, Amount: 0, Tau: limit.Tau()}})
		if err != nil {
			t.Fatal(err)
		}
		span := float64(tl.last-tl.first) / 1e6
		spanEnd := float64(end[0].Now-tl.first) / 1e6
		upper := limit.Burst + limit.Rate*span
		net := float64(tl.admitted) - float64(tl.returned)
		if net > upper {
			t.Errorf("%s: admitted %d - returned %d tokens in %.3fs of the backend's time, more than burst %g + rate %g * t = %.3f",
				key, tl.admitted, tl.returned, span, limit.Burst, limit.Rate, upper)
		}
		headroom := float64(limit.Tau()-end[0].Backlog) * limit.Rate / 1e6
		full := fullTime(append(tl.events, event{end[0].Now, end[0].Now + end[0].Backlog}))
		if full > 0 {
			t.Logf("%s: the bucket was full for %.3fs after the first call", key, float64(full)/1e6)
		}
		if full > int64(HammerWindow/time.Microsecond)/3 {
			t.Errorf("%s: the bucket was full for %.3fs of the run: not hammered", key, float64(full)/1e6)
		}
		want := float64(limit.Tau())*limit.Rate/1e6 + limit.Rate*(spanEnd-float64(full)/1e6)
		// < 1 us of refill per admitted call and per return, and the floor of tau.
		slack := float64(tl.admittedCalls+tl.returnCalls+1) * limit.Rate / 1e6
		if got := net + headroom; got > want+1e-6 || got < want-slack {
			t.Errorf("%s: admitted %d - returned %d + headroom %.4f = %.4f tokens, want %.4f (-%.4f): the bucket lost or made tokens",
				key, tl.admitted, tl.returned, headroom, got, want, slack)
		}
		if tl.admitted < 100 || tl.admittedCalls == tl.calls || tl.returned == 0 {
			t.Errorf("%s: %d of %d calls admitted, %d tokens returned: the test did not drain the bucket or return tokens",
				key, tl.admittedCalls, tl.calls, tl.returned)
		}
		t.Logf("%s: %d calls, %d tokens admitted, %d returned over %.3fs (bound %.1f)", key, tl.calls, tl.admitted, tl.returned, span, upper)
	}
}

// event is one op's outcome: the backend's clock and the bucket's TAT after.
type event struct{ now, tat int64 }

// fullTime replays the outcomes of one bucket in the backend's order (its
// clock, then the TAT for ops at the same microsecond) and sums the time
// the bucket was full between them: now - TAT before the op, when positive.
func fullTime(evs []event) int64 {
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].now != evs[j].now {
			return evs[i].now < evs[j].now
		}
		return evs[i].tat < evs[j].tat
	})
	var full int64
	for i := 1; i < len(evs); i++ {
		full += max(0, evs[i].now-evs[i-1].tat)
	}
	return full
}
