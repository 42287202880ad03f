package admin

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
)

//go:embed templates/*.html
var templates embed.FS

// Handler is the admin page (see the package doc for its routes). It is safe
// for concurrent use.
type Handler struct {
	o    *Outbox
	cfg  Config
	next http.Handler // the routes behind the cross-origin protection
	page *template.Template
	one  *template.Template
	ten  *template.Template // the tenants page
}

// Report is the page's data, served as JSON at api/status.
type Report struct {
	// Status is the figures, per topic and in total.
	Status Status `json:"status"`
	// Dead are up to Config.DeadLimit dead events, oldest death first,
	// without payloads (api/dead/{id} has them); Status.Total.Dead counts all.
	Dead []DeadEvent `json:"dead"`
	// Failing are up to Config.FailingLimit groups of failing events (by
	// type and last error), the largest first; Status.Total.Failing counts
	// the events.
	Failing []FailureGroup `json:"failing"`
	// Scheduled are up to Config.ScheduledLimit scheduled events neither
	// published nor dead, soonest due first; Status.Scheduled.Count counts
	// them all.
	Scheduled []ScheduledEvent `json:"scheduled"`
	// DeadGroups are up to Config.DeadGroupLimit groups of the dead events
	// (by type and normalised error), the largest first, with the keys the
	// group actions take.
	DeadGroups DeadGroups `json:"dead_groups"`
	// Writes tells whether the page may requeue, cancel scheduled events
	// and publish them now (Config.AllowWrites).
	Writes bool `json:"writes"`
	// Tenants counts the tenants of Config.Fleet by state, from the fleet's
	// memory (api/tenants lists them with their figures); absent without
	// Config.Fleet.
	Tenants *TenantSummary `json:"tenants,omitempty"`
}

// New returns the admin page for the outbox table cfg.Table of db. It does
// not look for the table: the page reports a missing table (it may be created
// after the handler, when the outbox hook is registered).
func New(db *gorm.DB, cfg Config) (*Handler, error) {
	o, err := newOutbox(db, cfg)
	if err != nil {
		return nil, err
	}
	cfg = o.cfg // defaults applied
	h := &Handler{o: o, cfg: cfg}
	funcs := template.FuncMap{
		"bytes": Bytes,
		"age":   func(s float64) string { return Age(time.Duration(s * float64(time.Second))) },
		"time":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
		"short": func(id string) string {
			if len(id) == 36 {
				return id[:8] + "…" + id[30:]
			}
			return id
		},
		"p": Printable,
		// wbr is Printable with a line break allowed after each dot,
		// underscore and slash: a name (order.paid, a topic) breaks between
		// its parts, not in a word.
		"wbr": func(s string) template.HTML {
			esc := template.HTMLEscapeString(Printable(s))
			return template.HTML(wbrAfter.Replace(esc)) //nolint:gosec // escaped above; only <wbr> added
		},
		"lines": func(s string) string { return PrintableLines(s, "") },
		"aget":  func(s float64) string { return Age(seconds(s).Truncate(time.Second)) },
		"agep":  func(s *float64) string { return Age(time.Duration(*s * float64(time.Second)).Truncate(time.Second)) },
		"lease": func(s *float64) string {
			if d := time.Duration(*s * float64(time.Second)).Truncate(time.Second); d > 0 {
				return "ends in " + Age(d)
			} else if d < 0 {
				return "ended " + Age(-d) + " ago"
			}
			return "ends now"
		},
		"ago": func(now, t time.Time) string { return Age(max(0, now.Sub(t)).Truncate(time.Second)) + " ago" },
		// late: a scheduled event due at t is overdue past Config.MaxAge.
		"late":   func(now, t time.Time) bool { return cfg.MaxAge > 0 && now.Sub(t) > cfg.MaxAge },
		"future": func(now, t time.Time) bool { return t.After(now) },
		"due": func(now, t time.Time) string {
			if d := t.Sub(now).Truncate(time.Second); d > 0 {
				return "in " + Age(d)
			}
			return "due now"
		},
	}
	h.page = template.Must(template.New("page.html").Funcs(funcs).ParseFS(templates, "templates/page.html", "templates/base.html"))
	h.one = template.Must(template.New("dead.html").Funcs(funcs).ParseFS(templates, "templates/dead.html", "templates/base.html"))
	h.ten = template.Must(template.New("tenants.html").Funcs(funcs).ParseFS(templates, "templates/tenants.html", "templates/base.html"))

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", h.servePage)
	mux.HandleFunc("GET /dead/{id}", h.serveDead)
	mux.HandleFunc("GET /api/status", h.serveStatus)
	mux.HandleFunc("GET /api/dead/{id}", h.serveDeadJSON)
	mux.HandleFunc("GET /tenants", h.serveTenants)
	mux.HandleFunc("GET /api/tenants", h.serveTenantsJSON)
	mux.HandleFunc("POST /requeue", h.write(h.requeue))
	mux.HandleFunc("POST /requeue-all", h.write(h.requeueAll))
	mux.HandleFunc("POST /requeue-group", h.write(h.groupAction(actionRequeueGroup)))
	mux.HandleFunc("POST /purge-group", h.write(h.groupAction(actionPurgeGroup)))
	mux.HandleFunc("POST /cancel-scheduled", h.write(h.reschedule(false)))
	mux.HandleFunc("POST /publish-now", h.write(h.reschedule(true)))
	cop := http.NewCrossOriginProtection()
	for _, origin := range cfg.TrustedOrigins {
		_ = cop.AddTrustedOrigin(origin) // checked by Validate
	}
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.log.Warn("admin: cross-origin request refused", "method", r.Method, "path", r.URL.Path,
			"origin", r.Header.Get("Origin"), "sec_fetch_site", r.Header.Get("Sec-Fetch-Site"))
		http.Error(w, "admin: cross-origin request refused", http.StatusForbidden)
	}))
	h.next = cop.Handler(mux)
	return h, nil
}

// Outbox returns the operations behind the page.
func (h *Handler) Outbox() *Outbox { return h.o }

// ServeHTTP serves the page and its routes.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	if r.URL.Path == "" {
		// Mounted with http.StripPrefix and asked for the prefix itself:
		// the page links relatively, so it must be served at prefix/.
		u := *r.URL
		if p, err := url.ParseRequestURI(r.RequestURI); err == nil {
			u.Path, u.RawPath = p.Path+"/", ""
		} else {
			u.Path = "/"
		}
		http.Redirect(w, r, u.RequestURI(), http.StatusMovedPermanently)
		return
	}
	h.next.ServeHTTP(w, r)
}

// wbrAfter adds a line break opportunity after the separators of a name.
var wbrAfter = strings.NewReplacer(".", ".<wbr>", "_", "_<wbr>", "/", "/<wbr>")

// pageData is what page.html renders.
type pageData struct {
	Config Config
	Report
	Flash, Error  string
	More          int64 // dead events not listed
	MoreFailing   int64 // failing events not in the groups listed
	MoreScheduled int64 // scheduled events not listed
	// LateScheduled: the earliest due scheduled event has waited past
	// Config.MaxAge.
	LateScheduled bool
}

func (h *Handler) report(ctx context.Context) (Report, error) {
	rep, err := h.outboxReport(ctx)
	if err == nil && h.cfg.Fleet != nil {
		rep.Tenants = h.tenantSummary()
	}
	return rep, err
}

// outboxReport reads the outbox's part of the report.
func (h *Handler) outboxReport(ctx context.Context) (Report, error) {
	st, err := h.o.Status(ctx)
	if err != nil {
		return Report{}, err
	}
	if st.TableMissing { // WAL mode: no table, only the slot
		return Report{Status: st, Dead: []DeadEvent{}, Failing: []FailureGroup{}, Scheduled: []ScheduledEvent{}, DeadGroups: DeadGroups{Groups: []DeadGroup{}},
			Writes: h.cfg.AllowWrites}, nil
	}
	dead, err := h.o.Dead(ctx, DeadFilter{}, h.cfg.DeadLimit)
	if err != nil {
		return Report{}, err
	}
	if dead == nil {
		dead = []DeadEvent{}
	}
	failing, err := h.o.FailingGroups(ctx, FailingFilter{}, h.cfg.FailingLimit)
	if err != nil {
		return Report{}, err
	}
	sched, err := h.o.Scheduled(ctx, ScheduledFilter{}, h.cfg.ScheduledLimit)
	if err != nil {
		return Report{}, err
	}
	groups := DeadGroups{Groups: []DeadGroup{}}
	if st.Total.Dead > 0 {
		if groups, err = h.o.DeadGroups(ctx, h.cfg.DeadGroupLimit); err != nil {
			return Report{}, err
		}
	}
	return Report{Status: st, Dead: dead, Failing: failing, Scheduled: sched, DeadGroups: groups, Writes: h.cfg.AllowWrites}, nil
}

func (h *Handler) servePage(w http.ResponseWriter, r *http.Request) {
	d := pageData{Config: h.cfg, Flash: flash(r.URL.Query())}
	rep, err := h.report(r.Context())
	if err != nil {
		h.o.log.Error("admin: read the outbox", "err", err)
		d.Error = err.Error()
		h.render(w, h.page, http.StatusInternalServerError, d)
		return
	}
	d.Report = rep
	d.More = rep.Status.Total.Dead - int64(len(rep.Dead))
	d.MoreFailing = rep.Status.Total.Failing
	for _, g := range rep.Failing {
		d.MoreFailing -= g.Events
	}
	if sf := rep.Status.Scheduled; sf != nil {
		d.MoreScheduled = sf.Count - int64(len(rep.Scheduled))
		d.LateScheduled = h.cfg.MaxAge > 0 && sf.Overdue() > h.cfg.MaxAge
	}
	h.render(w, h.page, http.StatusOK, d)
}

// flash says what the last POST did, from the query its redirect carries.
func flash(q url.Values) string {
	if v := q.Get("requeued"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			return "Requeued " + plural(n, "dead event") + ": the relays publish them now."
		}
	}
	if v := q.Get("notdead"); v != "" {
		if id, err := uuid.Parse(v); err == nil {
			return "Event " + id.String() + " is not dead (requeued or purged since): nothing was requeued."
		}
		return "Some of the events are not dead (requeued or purged since): nothing was requeued."
	}
	if v := groupFlash(q); v != "" {
		return v
	}
	if v := ScheduleOutcome(q.Get("scheduled")); v.sentence("") != "" {
		if id, err := uuid.Parse(q.Get("id")); err == nil {
			return v.sentence(id.String())
		}
	}
	return ""
}

// groupFlash says what a group action did, from its redirect's query: group
// (the action), n (how many events) and dry (a dry run).
func groupFlash(q url.Values) string {
	verb, past := "", ""
	switch q.Get("group") {
	case actionRequeueGroup:
		verb, past = "requeue", "Requeued"
	case actionPurgeGroup:
		verb, past = "purge", "Purged"
	default:
		return ""
	}
	n, err := strconv.ParseInt(q.Get("n"), 10, 64)
	if err != nil || n < 0 {
		return ""
	}
	switch {
	case q.Get("dry") == "1":
		return "Dry run: the group's action would " + verb + " " + plural(n, "dead event") + "; nothing was changed."
	case n == 0:
		return "Nothing left to " + verb + " in that group (done already?): nothing was changed."
	case verb == "requeue":
		return past + " " + plural(n, "dead event") + " of the group: the relays publish them now."
	}
	return past + " " + plural(n, "dead event") + " of the group."
}

// groupAction returns the route that requeues or purges (action) the dead
// group the form's key names (DeadGroup.Key), with dry_run=1 only counting,
// and for a purge older_than (a Go duration) keeping the group's younger
// events. It records the action with Config.Actor's name.
func (h *Handler) groupAction(action string) http.HandlerFunc {
	do := h.o.RequeueGroup
	if action == actionPurgeGroup {
		do = h.o.PurgeGroup
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			h.fail(w, r, http.StatusBadRequest, fmt.Errorf("admin: %s: %w", action, err))
			return
		}
		k, err := ParseDeadGroupKey(r.PostForm.Get("key"))
		if err != nil {
			h.fail(w, r, http.StatusBadRequest, err)
			return
		}
		a := GroupAction{DryRun: r.PostForm.Get("dry_run") == "1", By: h.actor(r)}
		if v := r.PostForm.Get("older_than"); v != "" && action == actionPurgeGroup {
			if a.OlderThan, err = time.ParseDuration(v); err != nil || a.OlderThan < 0 {
				h.fail(w, r, http.StatusBadRequest, fmt.Errorf("admin: %s: older_than %q is not a duration", action, v))
				return
			}
		}
		res, err := do(r.Context(), k, a)
		if err != nil {
			h.o.log.Error("admin: "+action, "err", err)
			h.fail(w, r, http.StatusInternalServerError, err)
			return
		}
		if wantsJSON(r) {
			writeJSON(w, http.StatusOK, res)
			return
		}
		q := url.Values{"group": {action}, "n": {strconv.FormatInt(res.Events, 10)}}
		if res.DryRun {
			q.Set("dry", "1")
		}
		w.Header().Set("Location", "./?"+q.Encode())
		w.WriteHeader(http.StatusSeeOther)
	}
}

// actor names who sent r, for the audit trail.
func (h *Handler) actor(r *http.Request) string {
	if h.cfg.Actor != nil {
		if by := h.cfg.Actor(r); by != "" {
			return by
		}
	}
	return "page " + r.RemoteAddr
}

// deadData is what dead.html renders.
type deadData struct {
	Config         Config
	Event          DeadEvent
	Writes         bool
	Payload, Error string
	Metadata       string
}

func (h *Handler) serveDead(w http.ResponseWriter, r *http.Request) {
	d := deadData{Config: h.cfg, Writes: h.cfg.AllowWrites}
	e, status, err := h.deadEvent(r)
	if err != nil {
		d.Error = err.Error()
		h.render(w, h.one, status, d)
		return
	}
	d.Event, d.Payload, d.Metadata = e, indent(e.Payload), indent(e.Metadata)
	h.render(w, h.one, http.StatusOK, d)
}

// deadEvent reads the dead event the path names, or says why not with an
// HTTP status.
func (h *Handler) deadEvent(r *http.Request) (DeadEvent, int, error) {
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		return DeadEvent{}, http.StatusBadRequest, err
	}
	e, err := h.o.DeadEvent(r.Context(), id)
	switch {
	case errors.Is(err, ErrNotDead):
		return DeadEvent{}, http.StatusNotFound, err
	case err != nil:
		h.o.log.Error("admin: read a dead event", "id", id, "err", err)
		return DeadEvent{}, http.StatusInternalServerError, err
	}
	return e, http.StatusOK, nil
}

func (h *Handler) serveStatus(w http.ResponseWriter, r *http.Request) {
	rep, err := h.report(r.Context())
	if err != nil {
		h.o.log.Error("admin: read the outbox", "err", err)
		writeJSON(w, http.StatusInternalServerError, jsonError{err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

func (h *Handler) serveDeadJSON(w http.ResponseWriter, r *http.Request) {
	e, status, err := h.deadEvent(r)
	if err != nil {
		writeJSON(w, status, jsonError{err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, e)
}

// jsonError is how the JSON routes report an error.
type jsonError struct {
	Error string `json:"error"`
}

// requeued is what the POST routes answer a JSON client.
type requeued struct {
	Requeued int64 `json:"requeued"`
}

// write guards a POST route: refused unless Config.AllowWrites.
func (h *Handler) write(f func(http.ResponseWriter, *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.cfg.AllowWrites {
			http.Error(w, "admin: read-only: writes are off (admin.Config.AllowWrites)", http.StatusForbidden)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
		f(w, r)
	}
}

func (h *Handler) requeue(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("admin: requeue: %w", err))
		return
	}
	var ids []uuid.UUID
	for _, s := range r.PostForm["id"] {
		id, err := parseID(s)
		if err != nil {
			h.fail(w, r, http.StatusBadRequest, err)
			return
		}
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		h.fail(w, r, http.StatusBadRequest, errors.New("admin: requeue: no id given"))
		return
	}
	n, err := h.o.Requeue(r.Context(), ids...)
	switch {
	case errors.Is(err, ErrNotDead):
		if wantsJSON(r) {
			writeJSON(w, http.StatusNotFound, jsonError{err.Error()})
			return
		}
		which := "several"
		if len(ids) == 1 {
			which = ids[0].String()
		}
		redirect(w, "notdead", which)
		return
	case err != nil:
		h.o.log.Error("admin: requeue", "err", err)
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	h.o.log.Info("admin: requeued", "ids", ids)
	h.done(w, r, n)
}

func (h *Handler) requeueAll(w http.ResponseWriter, r *http.Request) {
	n, err := h.o.RequeueAll(r.Context())
	if err != nil {
		h.o.log.Error("admin: requeue all", "err", err)
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	h.o.log.Info("admin: requeued all", "n", n)
	h.done(w, r, n)
}

// rescheduled is what the scheduled event routes answer a JSON client.
type rescheduled struct {
	ID      string          `json:"id"`
	Outcome ScheduleOutcome `json:"outcome"`
}

// reschedule returns the route that cancels the scheduled event the form's
// id names or, with now, makes it due now. It answers 200 when it did, 404
// when no scheduled event has the id, 409 when it is due, published or dead
// already (a JSON client), or redirects to the page, which says which.
func (h *Handler) reschedule(now bool) http.HandlerFunc {
	what, do := "cancel scheduled event", h.o.CancelScheduled
	if now {
		what, do = "publish scheduled event now", h.o.PublishNow
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			h.fail(w, r, http.StatusBadRequest, fmt.Errorf("admin: %s: %w", what, err))
			return
		}
		ids := r.PostForm["id"]
		if len(ids) != 1 {
			h.fail(w, r, http.StatusBadRequest, fmt.Errorf("admin: %s: give one id", what))
			return
		}
		id, err := parseID(ids[0])
		if err != nil {
			h.fail(w, r, http.StatusBadRequest, err)
			return
		}
		out, err := do(r.Context(), id)
		if err != nil {
			h.o.log.Error("admin: "+what, "id", id, "err", err)
			h.fail(w, r, http.StatusInternalServerError, err)
			return
		}
		h.o.log.Info("admin: "+what, "id", id, "outcome", string(out))
		if wantsJSON(r) {
			status := http.StatusOK
			switch {
			case out == ScheduleNotFound:
				status = http.StatusNotFound
			case !out.Changed():
				status = http.StatusConflict
			}
			writeJSON(w, status, rescheduled{ID: id.String(), Outcome: out})
			return
		}
		w.Header().Set("Location", "./?"+url.Values{"scheduled": {string(out)}, "id": {id.String()}}.Encode())
		w.WriteHeader(http.StatusSeeOther)
	}
}

// done answers a POST that requeued n events.
func (h *Handler) done(w http.ResponseWriter, r *http.Request, n int64) {
	if wantsJSON(r) {
		writeJSON(w, http.StatusOK, requeued{n})
		return
	}
	redirect(w, "requeued", strconv.FormatInt(n, 10))
}

// fail answers a POST that failed.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	if wantsJSON(r) {
		writeJSON(w, status, jsonError{err.Error()})
		return
	}
	http.Error(w, err.Error(), status)
}

// redirect sends the browser back to the page (the POST routes sit beside
// it), saying what was done. The Location stays relative (http.Redirect
// would resolve it against the path left by http.StripPrefix, losing the
// prefix).
func redirect(w http.ResponseWriter, key, value string) {
	w.Header().Set("Location", "./?"+url.Values{key: {value}}.Encode())
	w.WriteHeader(http.StatusSeeOther)
}

func wantsJSON(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "application/json")
}

// parseID reads an event id.
func parseID(s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, fmt.Errorf("admin: %q is not an event id (a UUID)", s)
	}
	return id, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func (h *Handler) render(w http.ResponseWriter, t *template.Template, status int, data any) {
	var buf bytes.Buffer
	if err := t.Execute(&buf, data); err != nil {
		h.o.log.Error("admin: render the page", "err", err)
		http.Error(w, "admin: render the page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// indent returns JSON indented for reading.
func indent(b json.RawMessage) string {
	var buf bytes.Buffer
	if json.Indent(&buf, b, "", "  ") != nil {
		return string(b)
	}
	return buf.String()
}
