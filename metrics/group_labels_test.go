package metrics_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/metrics"
)

// Group names are the consumers': a consumer of one subject may start
// group after group (each kept in the store once it leaves). The lag and
// lease gauges share MaxSeries among the subjects, so that groups named
// to sort first ("0001", "0002", …) on one subject cannot push the groups
// of every other subject under Other, where a lag alert on them would
// never fire.
func TestInventedGroupsDoNotBlindOtherSubjects(t *testing.T) {
	cases := []struct {
		name      string
		maxSeries int
		noise     int // groups started on "a.noise"
		others    []string
	}{
		{"one subject besides", 10, 50, []string{"orders"}},
		{"several subjects besides", 10, 500, []string{"b.payments", "orders", "z.refunds"}},
		{"noise under its share", 10, 2, []string{"b.payments", "orders"}},
		{"default bound", 0, 5000, []string{"orders"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var st pigeon.Stats
			var totalLag float64
			for i := range tc.noise {
				st.Groups = append(st.Groups, pigeon.GroupStats{Subject: "a.noise", Group: fmt.Sprintf("%05d", i), Lag: 7, InFlight: 1})
				totalLag += 7
			}
			for _, s := range tc.others {
				st.Groups = append(st.Groups, pigeon.GroupStats{Subject: s, Group: "billing", Lag: 1000, InFlight: 3})
				totalLag += 1000
			}
			reg := prometheus.NewRegistry()
			_, err := metrics.New(reg, &metrics.Options{NoRuntime: true, MaxSeries: tc.maxSeries,
				Stats: func(context.Context) (pigeon.Stats, error) { return st, nil }})
			require.NoError(t, err)
			fams := scrape(t, reg)
			for _, s := range tc.others {
				lag, ok := value(fams, "pigeon_consumer_lag", map[string]string{"subject": s, "group": "billing"})
				require.True(t, ok, "the group of %s has its own series", s)
				require.Equal(t, 1000.0, lag)
				inFlight, ok := value(fams, "pigeon_leases_in_flight", map[string]string{"subject": s, "group": "billing"})
				require.True(t, ok)
				require.Equal(t, 3.0, inFlight)
			}
			max := tc.maxSeries
			if max == 0 {
				max = metrics.DefaultMaxSeries
			}
			want := min(len(st.Groups), max) // beyond max-1 groups, max-1 and Other
			for _, name := range []string{"pigeon_consumer_lag", "pigeon_leases_in_flight"} {
				require.Len(t, fams[name].GetMetric(), want, "%s: the budget is used, and no more", name)
			}
			var sum float64
			for _, s := range fams["pigeon_consumer_lag"].GetMetric() {
				sum += s.GetGauge().GetValue()
			}
			require.Equal(t, totalLag, sum, "no lag lost or counted twice")
		})
	}
}
