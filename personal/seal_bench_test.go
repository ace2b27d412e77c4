package personal_test

import (
	"context"
	"testing"

	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/personal"
	"time"
)

func BenchmarkSeal(b *testing.B) {
	f := newFixture(b)
	reg := order.NewRegistry().Protect(personal.NewKeyring(f.d.App, personal.DatabaseKEKs(context.Background(), f.d.App, nil), personal.Config{}))
	ctx := context.Background()
	p := order.Created{OrderID: "o-1", CustomerID: "customer-1", Currency: "EUR", At: time.Now().UTC()}
	typ, _, data, _ := reg.Encode(p)
	if _, err := reg.Seal(ctx, "t-1", "order-o-1", typ, data, nil); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := reg.Seal(ctx, "t-1", "order-o-1", typ, data, nil); err != nil {
			b.Fatal(err)
		}
	}
}
