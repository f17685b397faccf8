package request

import (
	"math"
	"strconv"
	"testing"
)

// TestEnforcedChoosesTheShareOfIdentities: of many identities, as
// sequential as real keys and addresses often are, the share enforced is
// the percentage, within sampling error.
func TestEnforcedChoosesTheShareOfIdentities(t *testing.T) {
	const n = 20000
	for _, pct := range []float64{0, 0.5, 10, 25, 50, 90, 99.5, 100} {
		for _, shape := range []func(int) string{
			func(i int) string { return "ip:address=10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) },
			func(i int) string { return "key-" + strconv.Itoa(i) },
		} {
			enforced := 0
			for i := range n {
				if Enforced(shape(i), pct) {
					enforced++
				}
			}
			got := 100 * float64(enforced) / n
			// Four standard deviations of a binomial share.
			tol := 400 * math.Sqrt(pct/100*(1-pct/100)/n)
			if math.Abs(got-pct) > tol || (pct == 0 && enforced != 0) || (pct == 100 && enforced != n) {
				t.Errorf("enforce_percent %v on %s...: %.2f%% of %d identities enforced", pct, shape(0), got, n)
			}
		}
	}
}

// TestEnforcedIsStableAndOnlyGrows: an identity's choice never changes
// for a percentage, and every identity enforced at a percentage stays
// enforced at a higher one.
func TestEnforcedIsStableAndOnlyGrows(t *testing.T) {
	for i := range 5000 {
		id := "header:x-api-key=k" + strconv.Itoa(i)
		was := false
		for pct := 0.0; pct <= 100; pct += 2.5 {
			now := Enforced(id, pct)
			if now != Enforced(id, pct) {
				t.Fatalf("%s at %v%%: the choice changed between calls", id, pct)
			}
			if was && !now {
				t.Fatalf("%s: enforced below %v%% but not at it", id, pct)
			}
			was = now
		}
	}
}

// TestEnforcedIsIndependentOfRetryAfterJitter: the clients enforced are
// not the ones with the shortest (or longest) jitter.
func TestEnforcedIsIndependentOfRetryAfterJitter(t *testing.T) {
	const n = 20000
	var sumIn, sumOut float64
	var in, out int
	for i := range n {
		id := "ip:address=192.0.2." + strconv.Itoa(i)
		retry, _ := RejectTimes(100, id) // 100 to 150 seconds
		if Enforced(id, 50) {
			sumIn, in = sumIn+float64(retry), in+1
		} else {
			sumOut, out = sumOut+float64(retry), out+1
		}
	}
	if d := sumIn/float64(in) - sumOut/float64(out); math.Abs(d) > 1 {
		t.Errorf("mean Retry-After of enforced and spared identities differ by %.2f s", d)
	}
}
