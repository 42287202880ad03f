package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/fleet"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/publishers/natsjs"
)

// countingPublisher is Herald's JetStream publisher, counting the messages
// JetStream acknowledged (a result per message: relay.BatchPublisher).
type countingPublisher struct {
	*natsjs.Publisher
	acked atomic.Int64
}

func (p *countingPublisher) Publish(topic string, msgs ...*message.Message) error {
	err := p.Publisher.Publish(topic, msgs...)
	if err == nil {
		p.acked.Add(int64(len(msgs)))
	}
	return err
}

func (p *countingPublisher) PublishBatch(ctx context.Context, topic string, msgs ...*message.Message) []error {
	errs := p.Publisher.PublishBatch(ctx, topic, msgs...)
	for _, err := range errs {
		if err == nil {
			p.acked.Add(1)
		}
	}
	return errs
}

// statusDir is where the fleet processes write what they serve.
func statusDir(dir string) string { return filepath.Join(dir, "status") }

// runFleet is a fleet process: a fleet.Fleet over every tenant, a member of
// the control database's, until SIGTERM. It writes what it serves to a file
// of its own (see sampler).
func runFleet(ctx context.Context) error {
	c, err := readChildConfig()
	if err != nil {
		return err
	}
	log := c.logger()
	app := "fleetchaos_" + c.Instance
	shared, err := pgtest.OpenPool(pgtest.WithHost(c.FleetDSN, "", app))
	if err != nil {
		return err
	}
	if s, err := shared.DB(); err == nil {
		s.SetMaxOpenConns(c.Fleet.MaxConns) // the budget: fleet.Config.MaxConns
		s.SetMaxIdleConns(c.Fleet.MaxConns)
	}
	control, err := pgtest.OpenPool(pgtest.WithHost(pgtest.WithSearchPath(c.FleetDSN, controlSchema), "", app+"_control"))
	if err != nil {
		return err
	}
	if s, err := control.DB(); err == nil {
		s.SetMaxOpenConns(2)
	}
	pub, err := natsjs.New(natsjs.Config{URL: c.NATS, AckTimeout: c.Fleet.PublishTimeout * 4 / 5, Logger: log})
	if err != nil {
		return err
	}
	cp := &countingPublisher{Publisher: pub}
	defer cp.Close() //nolint:errcheck // the process ends
	defs := make([]fleet.Tenant, 0, len(c.Tenants))
	for _, t := range c.Tenants {
		if t.schema() {
			defs = append(defs, fleet.Tenant{ID: t.ID, DB: shared, Table: t.qualify("outbox_messages")})
			continue
		}
		defs = append(defs, fleet.Tenant{ID: t.ID, Open: func(context.Context) (*gorm.DB, error) { return t.open(c.MySQLVia) }})
	}
	rc := c.Fleet.relay()
	rc.InstanceID, rc.Logger = c.Instance, log
	f, err := fleet.New(cp, fleet.Config{
		Tenants:    func(context.Context) ([]fleet.Tenant, error) { return defs, nil },
		Relay:      rc,
		MaxConns:   c.Fleet.MaxConns,
		MaxProbe:   c.Fleet.MaxProbe,
		MaxBackoff: c.Fleet.TenantMaxBackoff,
		Members:    control,
		MemberTTL:  c.Fleet.MemberTTL,
		Logger:     log,
	})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	s, err := newSampler(c, f, cp)
	if err != nil {
		return err
	}
	defer s.close()
	go s.run(ctx)
	return f.Run(ctx)
}

// sampler writes, every 250ms when it changed, what the fleet process serves:
// one line "unixnano acked served failing", the lists comma-separated ("-":
// none). Its file (status/<instance>-<pid>) begins with "# slot instance pid".
type sampler struct {
	f      *fleet.Fleet
	pub    *countingPublisher
	file   *os.File
	fleets int
}

func newSampler(c childConfig, f *fleet.Fleet, pub *countingPublisher) (*sampler, error) {
	name := filepath.Join(statusDir(c.Dir), fmt.Sprintf("%s-%d", c.Instance, os.Getpid()))
	file, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	if _, err := fmt.Fprintf(file, "# %d %s %d\n", c.Slot, c.Instance, os.Getpid()); err != nil {
		_ = file.Close()
		return nil, err
	}
	return &sampler{f: f, pub: pub, file: file, fleets: c.Fleets}, nil
}

func (s *sampler) close() { _ = s.file.Close() }

func (s *sampler) run(ctx context.Context) {
	var last string
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var served, failing []string
		elsewhere := 0
		for _, st := range s.f.Status() {
			switch st.State {
			case "elsewhere":
				elsewhere++
				continue
			case "failing":
				failing = append(failing, st.ID)
			}
			served = append(served, st.ID)
		}
		if elsewhere == 0 && s.fleets > 1 {
			// Before its first beat a member serves every tenant, as it
			// would alone: not a share yet.
			continue
		}
		slices.Sort(served)
		line := fmt.Sprintf("%d %s %s", s.pub.acked.Load(), list(served), list(failing))
		if line == last {
			continue
		}
		last = line
		_, _ = fmt.Fprintf(s.file, "%d %s\n", time.Now().UnixNano(), line)
	}
}

func list(ids []string) string {
	if len(ids) == 0 {
		return "-"
	}
	return strings.Join(ids, ",")
}
