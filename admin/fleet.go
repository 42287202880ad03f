package admin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/heraldgo/herald/fleet"
)

// Fleet is a relay fleet whose tenants the page shows (Config.Fleet): a
// *fleet.Fleet.
type Fleet interface {
	// Status returns every tenant's state, from memory, the failing ones
	// first (fleet.Fleet.Status).
	Status() []fleet.TenantStatus
	// Stats reads the outbox figures of the tenants this process serves,
	// worst first (fleet.Fleet.Stats).
	Stats(ctx context.Context) ([]fleet.TenantStats, error)
}

var _ Fleet = (*fleet.Fleet)(nil)

// DefaultTenantTimeout is the default Config.TenantTimeout.
const DefaultTenantTimeout = 15 * time.Second

// TenantSummary counts a fleet's tenants by state. Report carries it (read
// from the fleet's memory, Fleet.Status: no database is asked), and so does
// TenantsReport.
type TenantSummary struct {
	// Total is how many tenants the fleet knows, served here or by another
	// member.
	Total int `json:"total"`
	// Failing is how many of them failed their last tries (the fleet backs
	// them off: their database down, their table gone, their grants
	// revoked).
	Failing int `json:"failing"`
	// States counts the tenants by state: "idle", "probing", "queued",
	// "active", "failing", "elsewhere" (another member serves them).
	States map[string]int `json:"states"`
}

// TenantFigures is one tenant of Config.Fleet: its state in the fleet and
// its outbox's figures.
type TenantFigures struct {
	// ID is the tenant's.
	ID string `json:"id"`
	// State is where the tenant is in the fleet (fleet.TenantStatus.State).
	State string `json:"state"`
	// Member is the fleet process that serves the tenant.
	Member string `json:"member"`
	// Pending, Failing and Dead count the tenant's events as Figures does;
	// OldestPendingSeconds is the age of its oldest pending event; Scheduled
	// counts its scheduled events (counted in Pending too). They are zero
	// when its figures were not read here (HasFigures).
	Pending              int64   `json:"pending"`
	Failing              int64   `json:"failing"`
	Dead                 int64   `json:"dead"`
	OldestPendingSeconds float64 `json:"oldest_pending_seconds"`
	Scheduled            int64   `json:"scheduled"`
	// Error is what the tenant last failed with in the fleet; "" unless it
	// is failing.
	Error string `json:"error"`
	// Failures is how many of the fleet's tries in a row failed;
	// LastFailedAt when the last one did (fleet.TenantStatus.FailingSince;
	// null unless failing).
	Failures     int        `json:"failures"`
	LastFailedAt *time.Time `json:"last_failed_at"`
	// StatsError is why the tenant's figures could not be read; "" when they
	// were, or when another member serves it.
	StatsError string `json:"stats_error"`
}

// HasFigures reports whether the tenant's figures were read: not when
// another member serves it (State "elsewhere"), nor when reading them
// failed.
func (t TenantFigures) HasFigures() bool { return t.State != "elsewhere" && t.StatsError == "" }

// TenantsReport is the tenants of Config.Fleet, served as JSON at
// api/tenants.
type TenantsReport struct {
	// At is when the fleet was read.
	At time.Time `json:"at"`
	TenantSummary
	// Tenants are up to Config.TenantLimit tenants, worst first: those this
	// process serves as fleet.Fleet.Stats orders them (failing, then by the
	// age of their oldest pending event, then by backlog), then those
	// another member serves (without figures).
	Tenants []TenantFigures `json:"tenants"`
	// More is how many tenants are not listed.
	More int `json:"more"`
	// StatsError is why the figures could not be read (not within
	// Config.TenantTimeout): the tenants are then listed with their states
	// only, failing first; "" when they were read.
	StatsError string `json:"stats_error"`
}

// tenantStates are the fleet's states in the order the page lists them.
var tenantStates = []string{"active", "queued", "probing", "idle", "failing", "elsewhere"}

// StateList is States as the page shows it: "2 idle, 1 failing", in the
// order of tenantStates, then any other state by name.
func (s TenantSummary) StateList() string {
	var parts []string
	add := func(state string) {
		if n := s.States[state]; n > 0 {
			parts = append(parts, strconv.Itoa(n)+" "+state)
		}
	}
	for _, st := range tenantStates {
		add(st)
	}
	others := slices.Sorted(maps.Keys(s.States))
	for _, st := range others {
		if !slices.Contains(tenantStates, st) {
			add(st)
		}
	}
	return strings.Join(parts, ", ")
}

func summarize(ts []TenantFigures) TenantSummary {
	s := TenantSummary{Total: len(ts), States: map[string]int{}}
	for _, t := range ts {
		s.States[t.State]++
		if t.Failures > 0 {
			s.Failing++
		}
	}
	return s
}

// tenantSummary counts cfg.Fleet's tenants from its memory.
func (h *Handler) tenantSummary() *TenantSummary {
	st := h.cfg.Fleet.Status()
	ts := make([]TenantFigures, len(st))
	for i, s := range st {
		ts[i] = statusFigures(s)
	}
	s := summarize(ts)
	return &s
}

func statusFigures(s fleet.TenantStatus) TenantFigures {
	t := TenantFigures{ID: s.ID, State: s.State, Member: s.Member, Failures: s.Failures}
	if s.Err != nil {
		t.Error = s.Err.Error()
	}
	if s.Failures > 0 && !s.FailingSince.IsZero() {
		at := s.FailingSince.UTC()
		t.LastFailedAt = &at
	}
	return t
}

func statsFigures(s fleet.TenantStats) TenantFigures {
	t := statusFigures(s.TenantStatus)
	t.Pending, t.Failing, t.Dead, t.Scheduled = s.Pending, s.Failing, s.Dead, s.Scheduled
	t.OldestPendingSeconds = s.OldestPending.Seconds()
	if s.StatsErr != nil {
		t.StatsError = s.StatsErr.Error()
	}
	return t
}

// errNoFleet answers the tenants routes without Config.Fleet.
var errNoFleet = errors.New("admin: no fleet: admin.Config.Fleet is not set")

// tenants reads cfg.Fleet's tenants, their figures within
// Config.TenantTimeout: past it, or when they cannot be read, their states
// only. It fails only when ctx ends.
func (h *Handler) tenants(ctx context.Context) (TenantsReport, error) {
	f := h.cfg.Fleet
	rep := TenantsReport{At: time.Now().UTC()}
	sctx, cancel := context.WithTimeout(ctx, h.cfg.TenantTimeout)
	stats, err := f.Stats(sctx)
	cancel()
	if ctx.Err() != nil {
		return TenantsReport{}, fmt.Errorf("admin: read the tenants: %w", ctx.Err())
	}
	status := f.Status()
	all := make([]TenantFigures, 0, len(status))
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			rep.StatsError = fmt.Sprintf("the figures were not read within %s (admin.Config.TenantTimeout)", h.cfg.TenantTimeout)
		} else {
			rep.StatsError = "the figures could not be read: " + err.Error()
		}
		h.o.log.Warn("admin: read the tenants' figures", "err", err)
		for _, s := range status { // failing first
			t := statusFigures(s)
			if t.State != "elsewhere" {
				t.StatsError = rep.StatsError
			}
			all = append(all, t)
		}
	} else {
		seen := make(map[string]bool, len(stats))
		for _, s := range stats {
			all = append(all, statsFigures(s))
			seen[s.ID] = true
		}
		for _, s := range status {
			if s.State == "elsewhere" && !seen[s.ID] {
				all = append(all, statusFigures(s))
			}
		}
	}
	rep.TenantSummary = summarize(all)
	n := min(len(all), h.cfg.TenantLimit)
	rep.Tenants, rep.More = all[:n], len(all)-n
	return rep, nil
}

// tenantsData is what tenants.html renders.
type tenantsData struct {
	Config Config
	TenantsReport
	Error string
}

func (h *Handler) serveTenants(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Fleet == nil {
		http.Error(w, errNoFleet.Error(), http.StatusNotFound)
		return
	}
	d := tenantsData{Config: h.cfg}
	rep, err := h.tenants(r.Context())
	if err != nil {
		h.o.log.Error("admin: read the tenants", "err", err)
		d.Error = err.Error()
		h.render(w, h.ten, http.StatusInternalServerError, d)
		return
	}
	d.TenantsReport = rep
	h.render(w, h.ten, http.StatusOK, d)
}

func (h *Handler) serveTenantsJSON(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Fleet == nil {
		writeJSON(w, http.StatusNotFound, jsonError{errNoFleet.Error()})
		return
	}
	rep, err := h.tenants(r.Context())
	if err != nil {
		h.o.log.Error("admin: read the tenants", "err", err)
		writeJSON(w, http.StatusInternalServerError, jsonError{err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, rep)
}
