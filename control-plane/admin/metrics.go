package admin

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/allotmesh/allot/control-plane/experiment"
	"github.com/allotmesh/allot/control-plane/store"
)

// Metrics are the admin API's Prometheus metrics:
//
//	allot_admin_request_duration_seconds{transport, method, code}  histogram
//	allot_experiments{status}                                      gauge (read from the store at scrape time)
//
// transport is http or grpc, method the RPC name (CreateExperiment, ...) and
// code the HTTP status or the gRPC code name. A nil *Metrics records
// nothing.
type Metrics struct {
	latency *prometheus.HistogramVec
}

// NewMetrics registers the admin API's metrics with reg; st backs the
// experiments-by-status gauge.
func NewMetrics(reg prometheus.Registerer, st store.Store) (*Metrics, error) {
	m := &Metrics{latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "allot_admin_request_duration_seconds",
		Help:    "Admin API request latency by transport, method and status code.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}, []string{"transport", "method", "code"})}
	if err := reg.Register(m.latency); err != nil {
		return nil, err
	}
	if err := reg.Register(&experimentsCollector{store: st}); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Metrics) observe(transport, method, code string, d time.Duration) {
	if m == nil {
		return
	}
	m.latency.WithLabelValues(transport, method, code).Observe(d.Seconds())
}

// experimentsCollector counts stored experiments by status at scrape time.
type experimentsCollector struct {
	store store.Store
}

var experimentsDesc = prometheus.NewDesc("allot_experiments", "Stored experiments by status (an empty status counts as running).", []string{"status"}, nil)

// Describe implements prometheus.Collector.
func (c *experimentsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- experimentsDesc }

// Collect implements prometheus.Collector. When the store cannot be read
// the metric is reported invalid, so the scrape shows the error.
func (c *experimentsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	items, _, err := c.store.List(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(experimentsDesc, err)
		return
	}
	counts := map[string]int{}
	for st := range experiment.Transitions {
		counts[st] = 0
	}
	for _, se := range items {
		e, err := experiment.FromStore(se)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(experimentsDesc, err)
			return
		}
		counts[experiment.Status(e)]++
	}
	for st, n := range counts {
		ch <- prometheus.MustNewConstMetric(experimentsDesc, prometheus.GaugeValue, float64(n), st)
	}
}
