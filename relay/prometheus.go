package relay

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector returns a Prometheus collector for the relay: the outbox gauges
// (herald_outbox_pending, herald_outbox_failing, herald_outbox_dead,
// herald_outbox_oldest_pending_age_seconds, read from the database at scrape time
// with a 5s timeout) and this relay's counters and publish durations
// (herald_relay_published_total, herald_relay_failed_total,
// herald_relay_dead_total, herald_relay_publish_duration_seconds), labelled with
// the table. Register it with prometheus.MustRegister.
func (r *Relay) Collector() prometheus.Collector { return &collector{r: r} }

type collector struct{ r *Relay }

var (
	descPending = prometheus.NewDesc("herald_outbox_pending", "Events not yet published and not dead.", []string{"table"}, nil)
	descFailing = prometheus.NewDesc("herald_outbox_failing", "Pending events whose publish failed at least once, waiting for a retry.", []string{"table"}, nil)
	descDead    = prometheus.NewDesc("herald_outbox_dead", "Dead events, waiting to be requeued.", []string{"table"}, nil)
	descOldest  = prometheus.NewDesc("herald_outbox_oldest_pending_age_seconds", "Age of the oldest pending event.", []string{"table"}, nil)
	descPub     = prometheus.NewDesc("herald_relay_published_total", "Events this relay published.", []string{"table"}, nil)
	descFailed  = prometheus.NewDesc("herald_relay_failed_total", "Failed publish attempts of this relay.", []string{"table"}, nil)
	descDied    = prometheus.NewDesc("herald_relay_dead_total", "Events that went dead in this relay.", []string{"table"}, nil)
	descUp      = prometheus.NewDesc("herald_outbox_stats_up", "1 if the outbox gauges could be read at this scrape.", []string{"table"}, nil)
)

// Describe sends the descriptions of every metric the collector exports.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPending, descFailing, descDead, descOldest, descPub, descFailed, descDied, descUp} {
		ch <- d
	}
	c.r.m.durations.Describe(ch)
}

// Collect reads the outbox gauges from the database and sends them with the
// relay's counters and durations.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	t := c.r.cfg.Table
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := c.r.Stats(ctx)
	up := 1.0
	if err != nil {
		up = 0
	} else {
		ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(s.Pending), t)
		ch <- prometheus.MustNewConstMetric(descFailing, prometheus.GaugeValue, float64(s.Failing), t)
		ch <- prometheus.MustNewConstMetric(descDead, prometheus.GaugeValue, float64(s.Dead), t)
		ch <- prometheus.MustNewConstMetric(descOldest, prometheus.GaugeValue, s.OldestPending.Seconds(), t)
	}
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, up, t)
	ch <- prometheus.MustNewConstMetric(descPub, prometheus.CounterValue, float64(c.r.m.published.Load()), t)
	ch <- prometheus.MustNewConstMetric(descFailed, prometheus.CounterValue, float64(c.r.m.failed.Load()), t)
	ch <- prometheus.MustNewConstMetric(descDied, prometheus.CounterValue, float64(c.r.m.dead.Load()), t)
	c.r.m.durations.Collect(ch)
}
