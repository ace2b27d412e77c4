package money

import (
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/strata-es/strata/domain"
)

func eur(amount int64) Money { return Money{Amount: amount, Currency: "EUR"} }

func TestNew(t *testing.T) {
	t.Parallel()
	for _, c := range []string{"EUR", "USD", "JPY", "AAA", "ZZZ"} {
		m, err := New(-5, c)
		if err != nil || m != (Money{Amount: -5, Currency: c}) {
			t.Errorf("New(-5, %q) = %v, %v", c, m, err)
		}
	}
	for _, c := range []string{"", "E", "EU", "EURO", "eur", "Eur", "E1R", "EU ", " EU", "€UR", "ÉUR", "EU\x00"} {
		m, err := New(1, c)
		if !errors.Is(err, ErrInvalidCurrency) || !errors.Is(err, domain.ErrInvalid) {
			t.Errorf("New(1, %q) error = %v, want ErrInvalidCurrency", c, err)
		}
		if m != (Money{}) {
			t.Errorf("New(1, %q) = %v along with an error", c, m)
		}
	}
}

func TestMoneyAdd(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b    int64
		want    int64
		wantErr error
	}{
		{a: 1, b: 2, want: 3},
		{a: -1, b: -2, want: -3},
		{a: 0, b: 0, want: 0},
		{a: math.MaxInt64, b: 0, want: math.MaxInt64},
		{a: math.MinInt64, b: 0, want: math.MinInt64},
		{a: math.MaxInt64 - 1, b: 1, want: math.MaxInt64},
		{a: math.MinInt64 + 1, b: -1, want: math.MinInt64},
		{a: math.MaxInt64, b: math.MinInt64, want: -1},
		{a: math.MaxInt64, b: -math.MaxInt64, want: 0},
		{a: math.MaxInt64, b: 1, wantErr: ErrAmountOverflow},
		{a: 1, b: math.MaxInt64, wantErr: ErrAmountOverflow},
		{a: math.MaxInt64, b: math.MaxInt64, wantErr: ErrAmountOverflow},
		{a: math.MinInt64, b: -1, wantErr: ErrAmountOverflow},
		{a: -1, b: math.MinInt64, wantErr: ErrAmountOverflow},
		{a: math.MinInt64, b: math.MinInt64, wantErr: ErrAmountOverflow},
	}
	for _, tc := range tests {
		got, err := eur(tc.a).Add(eur(tc.b))
		if tc.wantErr != nil {
			if !errors.Is(err, tc.wantErr) || !errors.Is(err, domain.ErrRejected) {
				t.Errorf("%d + %d: error = %v, want %v", tc.a, tc.b, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != eur(tc.want) {
			t.Errorf("%d + %d = %v, %v; want %d EUR", tc.a, tc.b, got, err, tc.want)
		}
	}
}

func TestMoneyAddCurrencyMismatch(t *testing.T) {
	t.Parallel()
	for _, pair := range [][2]Money{
		{eur(1), {Amount: 1, Currency: "USD"}},
		{{Amount: 1, Currency: "USD"}, eur(1)},
		{eur(0), {}},
		{{}, eur(0)},
	} {
		got, err := pair[0].Add(pair[1])
		if !errors.Is(err, ErrCurrencyMismatch) || !errors.Is(err, domain.ErrRejected) {
			t.Errorf("%v + %v: error = %v, want ErrCurrencyMismatch", pair[0], pair[1], err)
		}
		if got != (Money{}) {
			t.Errorf("%v + %v = %v along with an error", pair[0], pair[1], got)
		}
	}
}

func TestMoneyMul(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, q    int64
		want    int64
		wantErr error
	}{
		{a: 150, q: 3, want: 450},
		{a: 150, q: 0, want: 0},
		{a: 0, q: math.MaxInt64, want: 0},
		{a: math.MaxInt64, q: 0, want: 0},
		{a: math.MinInt64, q: 0, want: 0},
		{a: math.MaxInt64, q: 1, want: math.MaxInt64},
		{a: math.MinInt64, q: 1, want: math.MinInt64},
		{a: 1, q: math.MinInt64, want: math.MinInt64},
		{a: math.MaxInt64, q: -1, want: -math.MaxInt64},
		{a: -math.MaxInt64, q: -1, want: math.MaxInt64},
		{a: -7, q: 3, want: -21},
		{a: -7, q: -3, want: 21},
		{a: 1 << 31, q: 1 << 31, want: 1 << 62},
		{a: -(1 << 62), q: 2, want: math.MinInt64},
		{a: 1 << 62, q: -2, want: math.MinInt64},
		{a: math.MaxInt64 / 10000, q: 10000, want: math.MaxInt64 / 10000 * 10000},
		{a: math.MaxInt64, q: 2, wantErr: ErrAmountOverflow},
		{a: 2, q: math.MaxInt64, wantErr: ErrAmountOverflow},
		{a: 1 << 62, q: 2, wantErr: ErrAmountOverflow},
		{a: 1 << 32, q: 1 << 31, wantErr: ErrAmountOverflow},
		{a: math.MinInt64, q: -1, wantErr: ErrAmountOverflow},
		{a: -1, q: math.MinInt64, wantErr: ErrAmountOverflow},
		{a: math.MinInt64, q: 2, wantErr: ErrAmountOverflow},
		{a: math.MinInt64, q: math.MinInt64, wantErr: ErrAmountOverflow},
		{a: math.MaxInt64, q: math.MaxInt64, wantErr: ErrAmountOverflow},
		{a: math.MaxInt64/10000 + 1, q: 10000, wantErr: ErrAmountOverflow},
	}
	for _, tc := range tests {
		got, err := eur(tc.a).Mul(tc.q)
		if tc.wantErr != nil {
			if !errors.Is(err, tc.wantErr) || !errors.Is(err, domain.ErrRejected) {
				t.Errorf("%d * %d: error = %v, want %v", tc.a, tc.q, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != eur(tc.want) {
			t.Errorf("%d * %d = %v, %v; want %d EUR", tc.a, tc.q, got, err, tc.want)
		}
	}
}

// randInt64 favours values near the interesting edges.
func randInt64(r *rand.Rand) int64 {
	switch r.IntN(4) {
	case 0:
		return r.Int64() - r.Int64() // anything
	case 1:
		return math.MaxInt64 - r.Int64N(1000)
	case 2:
		return math.MinInt64 + r.Int64N(1000)
	default:
		n := r.Int64N(1 << uint(r.IntN(62)+1)) // magnitudes up to every power of two
		if r.IntN(2) == 0 {
			n = -n
		}
		return n
	}
}

// Add and Mul agree with exact big-integer arithmetic: the right result when
// it fits, ErrAmountOverflow when it does not.
func TestMoneyArithmeticAgainstBigInt(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	minI, maxI := big.NewInt(math.MinInt64), big.NewInt(math.MaxInt64)
	fits := func(x *big.Int) bool { return x.Cmp(minI) >= 0 && x.Cmp(maxI) <= 0 }
	for range 20000 {
		a, b := randInt64(r), randInt64(r)
		exact := new(big.Int).Add(big.NewInt(a), big.NewInt(b))
		got, err := eur(a).Add(eur(b))
		if fits(exact) {
			if err != nil || got.Amount != exact.Int64() {
				t.Fatalf("%d + %d = %v, %v; want %s", a, b, got, err, exact)
			}
		} else if !errors.Is(err, ErrAmountOverflow) {
			t.Fatalf("%d + %d = %v, %v; want ErrAmountOverflow", a, b, got, err)
		}

		exact = new(big.Int).Mul(big.NewInt(a), big.NewInt(b))
		got, err = eur(a).Mul(b)
		if fits(exact) {
			if err != nil || got.Amount != exact.Int64() {
				t.Fatalf("%d * %d = %v, %v; want %s", a, b, got, err, exact)
			}
		} else if !errors.Is(err, ErrAmountOverflow) {
			t.Fatalf("%d * %d = %v, %v; want ErrAmountOverflow", a, b, got, err)
		}
	}
}

func TestMoneyMulKeepsCurrency(t *testing.T) {
	t.Parallel()
	usd := Money{Amount: 3, Currency: "USD"}
	for _, q := range []int64{0, 1, 5} {
		if got, err := usd.Mul(q); err != nil || got.Currency != "USD" {
			t.Errorf("Mul(%d) = %v, %v; want USD", q, got, err)
		}
	}
	if got, err := (Money{Currency: "USD"}).Mul(7); err != nil || got != (Money{Currency: "USD"}) {
		t.Errorf("zero Mul = %v, %v", got, err)
	}
}

func TestMoneyJSON(t *testing.T) {
	t.Parallel()
	data, err := json.Marshal(Money{Amount: -12345, Currency: "EUR"})
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != `{"amount":-12345,"currency":"EUR"}` {
		t.Fatalf("JSON = %s", data)
	}
	var m Money
	if err := json.Unmarshal([]byte(`{"amount":9223372036854775807,"currency":"JPY"}`), &m); err != nil || m != (Money{Amount: math.MaxInt64, Currency: "JPY"}) {
		t.Fatalf("Unmarshal = %v, %v", m, err)
	}
}

// The messages reach API clients (the orders module answers 422 "amount is
// too large"): they are part of the contract, like the kinds they wrap.
func TestErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		kind error
		msg  string
	}{
		{ErrInvalidCurrency, domain.ErrInvalid, "invalid: currency must be three upper-case letters"},
		{ErrCurrencyMismatch, domain.ErrRejected, "rejected: amounts are in different currencies"},
		{ErrAmountOverflow, domain.ErrRejected, "rejected: amount is too large"},
	} {
		if !errors.Is(tc.err, tc.kind) || tc.err.Error() != tc.msg {
			t.Errorf("%v: want %q wrapping %v", tc.err, tc.msg, tc.kind)
		}
	}
}
