package xds

import (
	"github.com/allotmesh/allot/control-plane/rollout"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the server's Prometheus metrics. None has a per-proxy or
// per-cluster label: a mesh has thousands of proxies and hundreds of
// services, and a histogram multiplies each label value by its buckets.
// Which proxy or cluster lags or rejects is in Proxies and the logs.
type metrics struct {
	ackLatency prometheus.Histogram
	nacks      prometheus.Counter
	pushes     prometheus.Counter
	pushErrors prometheus.Counter
	overLimit  *prometheus.CounterVec
	proxies    *proxyCollector
}

func newMetrics(s *Server) *metrics {
	return &metrics{
		ackLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "allot_xds_apply_seconds",
			Help: "Time from a cluster's configuration change (snapshot set after a write or schedule boundary) " +
				"to each of its proxies acknowledging it; one observation per proxy.",
			Buckets: prometheus.ExponentialBuckets(0.002, 2, 14), // 2 ms … 16 s
		}),
		nacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "allot_xds_rejections_total",
			Help: "Configurations proxies rejected (NACKs).",
		}),
		pushes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "allot_xds_pushes_total",
			Help: "Configurations sent to proxies (ECDS responses).",
		}),
		pushErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "allot_xds_push_errors_total",
			Help: "Cluster configurations that could not be built or set; their proxies keep the previous one.",
		}),
		overLimit: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_xds_over_limit_total",
			Help: "Inputs from proxies over their limit, a node changed within a stream, or a resource type its stream " +
				"does not serve (docs/reference.md, What proxies send), by field and what was done: refused (the stream " +
				"ends), truncated (kept cut, with a marker), " +
				"ignored, or evicted (clusters: the longest-idle cluster forgotten for a new one).",
		}, []string{"field", "action"}),
		proxies: &proxyCollector{
			s: s,
			byState: prometheus.NewDesc("allot_xds_proxies",
				"Connected proxies by state against their cluster's current configuration.", []string{"state"}, nil),
			connected: prometheus.NewDesc("allot_xds_connected_proxies",
				"Connected proxies (xDS streams that identified their node).", nil, nil),
		},
	}
}

// Collectors returns the server's metrics for registration, e.g.
// prometheus.MustRegister(x.Collectors()...).
func (s *Server) Collectors() []prometheus.Collector {
	m := s.metrics
	return []prometheus.Collector{m.ackLatency, m.nacks, m.pushes, m.pushErrors, m.overLimit, m.proxies}
}

// proxyCollector computes the proxy gauges at scrape time.
type proxyCollector struct {
	s         *Server
	byState   *prometheus.Desc
	connected *prometheus.Desc
}

func (c *proxyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.byState
	ch <- c.connected
}

func (c *proxyCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[rollout.State]int{rollout.StateApplied: 0, rollout.StatePending: 0, rollout.StateRejected: 0, rollout.StateUnserved: 0}
	total := 0
	c.s.mu.Lock()
	for _, st := range c.s.streams {
		if st.identified {
			counts[st.state(c.s.clusters[st.cluster])]++
			total++
		}
	}
	c.s.mu.Unlock()
	for state, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.byState, prometheus.GaugeValue, float64(n), string(state))
	}
	ch <- prometheus.MustNewConstMetric(c.connected, prometheus.GaugeValue, float64(total))
}
