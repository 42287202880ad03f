package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/examples/internal/brokertest"
	"github.com/heraldgo/herald/fleet"
	"github.com/heraldgo/herald/relay"
)

// The scale part: P fleet processes (bench fleet-member, each a fleet over
// all the tenants with fleet.Config.Members set to the space's database)
// share T tenants of E pending events each; for each P of -processes, the
// time until all T×E are published, how the tenants split between the
// members, and (P >= 2) how long the tenants of a member killed with SIGKILL
// wait before another member takes them over.
//
// The line protocol between the bench and a member process:
//
//   - to the member (its standard input): "tenant <id> <table>" per tenant,
//     then "end"; later "go", which makes its fleet list the tenants (until
//     then its Tenants returns none, so that every member knows the others
//     before any of them relays). The end of its input changes nothing; it
//     stops at SIGTERM.
//   - from it (its standard output): "members <n>" when its fleet's live
//     members change (the fleet's log "fleet: members changed"); "count <n>
//     <owned> <last> <listed>" every 200 ms (burn events published, tenants
//     it serves, unix ns of its last burn publish and of its fleet's first
//     listing of the tenants) and "done ..." alike at its end; "ev <tenant> <aggregate id> <unix ns>" for each trickle event it
//     published, written before its Publish returns (so before the event
//     is marked published).

// scaleTrickle is how often the takeover writes one event to each of its
// scaleTrickleTenants tenants (the first listed, spread over the members by
// the hash): one to each of 1,000 tenants a second would ask for more runs
// than the fleet makes, and the figure would be that backlog's, not the
// takeover's.
const (
	scaleTrickle        = time.Second
	scaleTrickleTenants = 100
)

// scaleFigure is one scale run's figures.
type scaleFigure struct {
	wall          time.Duration // from the first member's listing of the tenants to the last of T×E burn events published
	minOwn        int
	maxOwn        int
	takeover      bool
	all, victim   []time.Duration // the kill round: kill -> publish, sorted (victim: the killed member's tenants)
	before        []time.Duration // the trickle before the kill (its first round aside): commit -> publish, sorted
	lost, dups    int
	burnDups      int64
	unprocessed   int64
	victimTenants int
}

// fleetScale is the scale part: for each count of -processes, that many
// member processes share the tenants (see scaleOnce).
func fleetScale(space *fleetSpace, shared bool, tenants, per int, procs []int, ttl time.Duration, conns int, pubKind string) error {
	bdb := space.bdb
	if !shared {
		return errors.New("the members read the tenants through one shared pool: PostgreSQL, or MySQL with -shared")
	}
	if len(procs) == 0 {
		return errors.New("-processes: none")
	}
	if conns <= 0 {
		var err error
		if conns, err = memberConns(space, slices.Max(procs)); err != nil {
			return err
		}
	}
	ts, err := space.tenants("tenant", tenants)
	if err != nil {
		return err
	}
	fmt.Printf("Scale-out on %s: P fleet processes (bench fleet-member) sharing %d tenants through fleet.Config.Members (the bench's database), "+
		"MemberTTL %s, MaxConns %d each (all P of the largest run within the server's connections), otherwise default configurations, "+
		"each publishing to %s. Throughput: %d pending events loaded into each tenant before the members start; the members are told to list "+
		"the tenants once each knows all P; time from the first member's fleet listing them (each lists them within about a second of being told) "+
		"to the last of the %d events published (when the sum of the members' counts reached it; duplicates beyond it counted). Takeover (P >= 2): one event written to each of %d tenants every %s; "+
		"one member killed (SIGKILL); time from the kill to the publish of each tenant's first event written after it; lost: trickle events "+
		"never published; duplicates: events published more than once (trickle and burn).\n\n",
		bdb.name, tenants, ttl, conns, pubKind, per, tenants*per, min(tenants, scaleTrickleTenants), scaleTrickle)
	fmt.Println("| processes | tenants | events | time | events/s | tenants per member (min–max) | takeover: all tenants max / p50 | " +
		"the killed member's tenants: n, max / p50 | lost | duplicates |")
	fmt.Println("|---:|---:|---:|---:|---:|---|---|---|---:|---:|")
	for _, p := range procs {
		fig, err := scaleOnce(space, ts, p, per, ttl, conns, pubKind)
		if err != nil {
			return fmt.Errorf("%d processes: %w", p, err)
		}
		n := len(ts) * per
		all, victim := "—", "—"
		if fig.takeover {
			all = fmt.Sprintf("%.2f s / %.2f s", fig.all[len(fig.all)-1].Seconds(), pct(fig.all, .5).Seconds())
			victim = fmt.Sprintf("%d, —", fig.victimTenants)
			if len(fig.victim) > 0 {
				victim = fmt.Sprintf("%d, %.2f s / %.2f s", fig.victimTenants, fig.victim[len(fig.victim)-1].Seconds(), pct(fig.victim, .5).Seconds())
			}
		}
		fmt.Printf("| %d | %d | %d | %.2f s | %.0f | %d–%d | %s | %s | %d | %d |\n", p, len(ts), n, fig.wall.Seconds(), float64(n)/fig.wall.Seconds(),
			fig.minOwn, fig.maxOwn, all, victim, fig.lost, fig.dups+int(fig.burnDups))
	}
	fmt.Printf("\ncommand: go run ./internal/bench %s\n\n", strings.Join(os.Args[1:], " "))
	return nil
}

// memberConns is each member's MaxConns when -member-conns is not given:
// the default 48, or less so that procs members fit in the server's
// max_connections beside 30 for the rest (the bench's loaders and writer,
// the members' control pools, the machine's other users).
func memberConns(space *fleetSpace, procs int) (int, error) {
	q := `SHOW max_connections`
	if space.bdb.name == "mysql" {
		q = `SELECT @@max_connections`
	}
	var s string
	if err := space.admin.QueryRow(q).Scan(&s); err != nil {
		return 0, fmt.Errorf("max_connections: %w", err)
	}
	most, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("max_connections: %w", err)
	}
	conns := min(48, (most-30)/procs)
	if conns < 4 {
		return 0, fmt.Errorf("max_connections %d leaves %d connections to each of %d members, fewer than 4 (-member-conns sets them)", most, conns, procs)
	}
	return conns, nil
}

// scaleOnce loads per events into each of ts, starts p members, and
// measures their burn-down and (p >= 2) the takeover of a killed member's
// tenants.
func scaleOnce(space *fleetSpace, ts []tenantOutbox, p, per int, ttl time.Duration, conns int, pubKind string) (scaleFigure, error) {
	var fig scaleFigure
	topic := brokertest.Topic("bench")
	t0 := time.Now()
	if err := space.each(ts, func(db *gorm.DB, _ tenantOutbox) error { return loadOutbox(db, per, topic) }); err != nil {
		return fig, fmt.Errorf("load: %w", err)
	}
	fmt.Fprintf(os.Stderr, "scale: %d events loaded into each of %d tenants in %s\n", per, len(ts), time.Since(t0).Round(time.Millisecond))
	r := &scaleRun{pubs: map[string][]scalePub{}}
	defer func() { _ = r.stop() }()
	env := []string{"HERALD_BENCH_DB=" + space.bdb.name, "HERALD_BENCH_DSN=" + space.sharedDSN(ts), "HERALD_BENCH_TOPIC=" + topic,
		"HERALD_BENCH_PUBLISHER=" + pubKind, "HERALD_BENCH_MEMBER_TTL=" + ttl.String(), "HERALD_BENCH_MAX_CONNS=" + strconv.Itoa(conns)}
	for i := range p {
		if err := r.start(fmt.Sprintf("scale-p%d-m%d", p, i), env, ts); err != nil {
			return fig, err
		}
	}
	t0 = time.Now()
	if err := r.waitFor("every member to know all "+strconv.Itoa(p), 3*ttl+30*time.Second, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, m := range r.members {
			if m.live != p {
				return false
			}
		}
		return true
	}); err != nil {
		return fig, err
	}
	fmt.Fprintf(os.Stderr, "scale: %d members know each other after %s; go\n", p, time.Since(t0).Round(time.Millisecond))

	// Throughput: "go", then the last burn event published (timed from the
	// first member's listing of the tenants).
	start := time.Now()
	for _, m := range r.members {
		if _, err := io.WriteString(m.in, "go\n"); err != nil {
			return fig, fmt.Errorf("member %s: %w", m.name, err)
		}
	}
	total := int64(len(ts) * per)
	next := start.Add(5 * time.Second)
	if err := r.waitFor(fmt.Sprintf("%d events published", total), 10*time.Minute, func() bool {
		n, _ := r.burnt()
		if time.Now().After(next) {
			fmt.Fprintf(os.Stderr, "scale: %d of %d published after %s\n", n, total, time.Since(start).Round(time.Second))
			next = next.Add(5 * time.Second)
		}
		return n >= total
	}); err != nil {
		return fig, err
	}
	_, last := r.burnt()
	r.mu.Lock()
	listed := last
	for _, m := range r.members {
		if m.listed > 0 && time.Unix(0, m.listed).Before(listed) {
			listed = time.Unix(0, m.listed)
		}
	}
	fig.wall = last.Sub(listed)
	for i, m := range r.members {
		if i == 0 || m.owned < fig.minOwn {
			fig.minOwn = m.owned
		}
		fig.maxOwn = max(fig.maxOwn, m.owned)
	}
	r.mu.Unlock()
	fmt.Fprintf(os.Stderr, "scale: the first member listed the tenants %s after go; %d events published %s later (%.0f/s); tenants per member %d–%d\n",
		listed.Sub(start).Round(time.Millisecond), total, fig.wall.Round(time.Millisecond), float64(total)/fig.wall.Seconds(), fig.minOwn, fig.maxOwn)

	if p >= 2 {
		if err := r.takeover(space, ts, ttl, &fig); err != nil {
			return fig, fmt.Errorf("takeover: %w", err)
		}
	}
	if err := r.stop(); err != nil {
		return fig, err
	}
	r.mu.Lock()
	var n int64
	for _, m := range r.members {
		n += m.n
	}
	r.mu.Unlock()
	fig.burnDups = max(n-total, 0)
	var err error
	if fig.unprocessed, err = unprocessed(space, ts); err != nil {
		return fig, err
	}
	if fig.unprocessed > 0 {
		fmt.Fprintf(os.Stderr, "scale: %d events unprocessed in the outboxes once the members stopped\n", fig.unprocessed)
	}
	return fig, nil
}

// unprocessed counts the events of ts not marked published (pending or
// dead), through the space's administrative pool, a statement per 100
// tenants.
func unprocessed(space *fleetSpace, ts []tenantOutbox) (int64, error) {
	var total int64
	for chunk := range slices.Chunk(ts, 100) {
		parts := make([]string, len(chunk))
		for i, t := range chunk {
			parts[i] = "(SELECT count(*) FROM " + t.table + " WHERE processed_at IS NULL)"
		}
		var n int64
		if err := space.admin.QueryRow(`SELECT ` + strings.Join(parts, " + ")).Scan(&n); err != nil {
			return 0, fmt.Errorf("count unprocessed: %w", err)
		}
		total += n
	}
	return total, nil
}

// scaleRun is the member processes of one scale run, as the bench follows
// them through their output.
type scaleRun struct {
	members []*scaleMember
	wg      sync.WaitGroup // the readers of their output
	stopped bool

	mu   sync.Mutex
	pubs map[string][]scalePub // the trickle events published, by "tenant/aggregate id"
}

// scaleMember is one member process. Its figures are under scaleRun.mu.
type scaleMember struct {
	name   string
	cmd    *exec.Cmd
	in     io.WriteCloser
	read   chan struct{} // closed when its output ends
	killed bool

	live  int   // the live members its fleet knows
	n     int64 // burn events it published
	owned int   // tenants it serves
	last  int64 // unix ns of its last burn publish
	// listed is the unix ns its fleet first listed the tenants at.
	listed int64
}

// scalePub is one publish of a trickle event: by which member, when.
type scalePub struct {
	member int
	at     time.Time
}

// start starts member process name (bench fleet-member) with env and sends
// it the tenants.
func (r *scaleRun) start(name string, env []string, ts []tenantOutbox) error {
	cmd := exec.Command(os.Args[0], "fleet-member")
	cmd.Env = append(append(os.Environ(), env...), "HERALD_BENCH_MEMBER="+name)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("member %s: %w", name, err)
	}
	m := &scaleMember{name: name, cmd: cmd, in: in, read: make(chan struct{})}
	i := len(r.members)
	r.members = append(r.members, m)
	r.wg.Go(func() {
		defer close(m.read)
		r.follow(i, m, out)
	})
	w := bufio.NewWriter(in)
	for _, t := range ts {
		_, _ = fmt.Fprintf(w, "tenant %s %s\n", t.id, t.table) // Flush reports a failed write
	}
	_, _ = fmt.Fprintln(w, "end")
	if err := w.Flush(); err != nil {
		return fmt.Errorf("member %s: %w", name, err)
	}
	return nil
}

// follow reads the output of m, member i, until it ends (see the line
// protocol).
func (r *scaleRun) follow(i int, m *scaleMember, out io.Reader) {
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		num := func(k int) int64 {
			if k >= len(f) {
				return 0
			}
			v, _ := strconv.ParseInt(f[k], 10, 64)
			return v
		}
		if len(f) == 0 {
			continue
		}
		r.mu.Lock()
		switch f[0] {
		case "members":
			m.live = int(num(1))
		case "count", "done":
			m.n, m.owned, m.last, m.listed = num(1), int(num(2)), num(3), num(4)
		case "ev":
			if len(f) == 4 {
				key := f[1] + "/" + f[2]
				r.pubs[key] = append(r.pubs[key], scalePub{member: i, at: time.Unix(0, num(3))})
			}
		}
		r.mu.Unlock()
	}
}

// waitFor polls ok every 20 ms until it holds, failing after limit or when
// a member not killed ends.
func (r *scaleRun) waitFor(what string, limit time.Duration, ok func() bool) error {
	deadline := time.Now().Add(limit)
	for {
		if ok() {
			return nil
		}
		for _, m := range r.members {
			select {
			case <-m.read:
				if !m.killed {
					return fmt.Errorf("waiting for %s: member %s ended", what, m.name)
				}
			default:
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting for %s: not within %s", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// burnt returns the burn events the members published and when the last
// of them was.
func (r *scaleRun) burnt() (int64, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n, last int64
	for _, m := range r.members {
		n += m.n
		last = max(last, m.last)
	}
	return n, time.Unix(0, last)
}

// takeover writes one event to each of the first scaleTrickleTenants tenants
// every scaleTrickle; once the
// first round is published and three are written, it kills the last member
// and measures, for the first round written after the kill, each tenant's
// time from the kill to the publish; then it waits for every event written
// to be published, and counts those never published and the duplicates.
func (r *scaleRun) takeover(space *fleetSpace, ts []tenantOutbox, ttl time.Duration, fig *scaleFigure) error {
	fig.takeover = true
	ts = ts[:min(len(ts), scaleTrickleTenants)]
	bdb := space.bdb
	dsn := space.sharedDSN(ts)
	if bdb.name == "postgres" { // the trickle's commits unflushed: a light writer
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		dsn += sep + "synchronous_commit=off"
	}
	db, err := bdb.open(dsn)
	if err != nil {
		return err
	}
	defer closeGorm(db)
	w, err := db.DB()
	if err != nil {
		return err
	}
	w.SetMaxOpenConns(4)
	inserts := make([]string, len(ts))
	for i, t := range ts {
		inserts[i] = strings.Replace(bdb.rawOutboxInsert, "outbox_messages", t.table, 1)
	}
	var (
		wmu     sync.Mutex
		written = map[string]time.Time{} // by "tenant/aggregate id"
		rounds  [][]string               // each round's keys
	)
	// write writes round k, one event to every tenant, four at a time.
	write := func(k int) error {
		agg := "r" + strconv.Itoa(k)
		keys := make([]string, len(ts))
		err := fourAtATime(len(ts), func(i int) error {
			if _, err := w.Exec(inserts[i], bdb.rawOutboxArgs(agg, benchPayload)...); err != nil {
				return fmt.Errorf("tenant %s: %w", ts[i].id, err)
			}
			keys[i] = ts[i].id + "/" + agg
			wmu.Lock()
			written[keys[i]] = time.Now()
			wmu.Unlock()
			return nil
		})
		rounds = append(rounds, keys)
		return err
	}
	published := func(keys []string) bool { // under r.mu
		for _, k := range keys {
			if len(r.pubs[k]) == 0 {
				return false
			}
		}
		return true
	}
	tick := time.NewTicker(scaleTrickle)
	defer tick.Stop()
	warm := time.Now().Add(3*ttl + 30*time.Second)
	for k := 0; ; k++ {
		if err := write(k); err != nil {
			return err
		}
		r.mu.Lock()
		ready := published(rounds[0])
		r.mu.Unlock()
		if ready && k >= 2 {
			break
		}
		if time.Now().After(warm) {
			return fmt.Errorf("the trickle's first round not published within %s", 3*ttl+30*time.Second)
		}
		<-tick.C
	}

	victim := len(r.members) - 1
	v := r.members[victim]
	v.killed = true
	killAt := time.Now()
	if err := v.cmd.Process.Kill(); err != nil { // SIGKILL, the process this run started
		return fmt.Errorf("kill member %s: %w", v.name, err)
	}
	fmt.Fprintf(os.Stderr, "scale: member %s (pid %d) killed; %d trickle rounds before\n", v.name, v.cmd.Process.Pid, len(rounds))
	killRound := len(rounds)
	limit := killAt.Add(3*ttl + 30*time.Second)
	for k := killRound; ; k++ {
		if err := write(k); err != nil {
			return err
		}
		r.mu.Lock()
		done := published(rounds[killRound])
		r.mu.Unlock()
		if done || time.Now().After(limit) {
			break
		}
		<-tick.C
	}
	tick.Stop()
	var all []string
	for _, keys := range rounds {
		all = append(all, keys...)
	}
	if err := r.waitFor("every trickle event published", 30*time.Second, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return published(all)
	}); err != nil {
		fmt.Fprintf(os.Stderr, "scale: %v; counted as lost\n", err)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	first := func(k string) (scalePub, bool) {
		ps := r.pubs[k]
		if len(ps) == 0 {
			return scalePub{}, false
		}
		return slices.MinFunc(ps, func(a, b scalePub) int { return a.at.Compare(b.at) }), true
	}
	victims := map[string]bool{} // the tenants the victim published trickle events of before the kill
	for round, keys := range rounds[:killRound] {
		for _, k := range keys {
			for _, p := range r.pubs[k] {
				if p.member == victim && p.at.Before(killAt) {
					victims[strings.SplitN(k, "/", 2)[0]] = true
				}
			}
			if p, ok := first(k); ok && round > 0 { // the first round: its tenants were idle, probed seconds apart
				fig.before = append(fig.before, max(p.at.Sub(written[k]), 0))
			}
		}
	}
	fig.victimTenants = len(victims)
	for _, k := range rounds[killRound] {
		p, ok := first(k)
		if !ok {
			continue
		}
		d := p.at.Sub(killAt)
		fig.all = append(fig.all, d)
		if victims[strings.SplitN(k, "/", 2)[0]] {
			fig.victim = append(fig.victim, d)
		}
	}
	for _, k := range all {
		switch n := len(r.pubs[k]); {
		case n == 0:
			fig.lost++
		case n > 1:
			fig.dups += n - 1
		}
	}
	slices.Sort(fig.all)
	slices.Sort(fig.victim)
	slices.Sort(fig.before)
	if len(fig.all) == 0 {
		return errors.New("no event of the round after the kill published")
	}
	fmt.Fprintf(os.Stderr, "scale: trickle before the kill (its first round aside): commit->publish p50 %s, max %s; after the kill: every tenant's event published "+
		"within %s (the killed member's %d tenants: %s); %d of %d trickle events never published, %d duplicates\n",
		pctOr(fig.before, .5), pctOr(fig.before, 1), fig.all[len(fig.all)-1].Round(time.Millisecond), len(victims),
		pctOr(fig.victim, 1), fig.lost, len(all), fig.dups)
	return nil
}

// pctOr is pct(l, q) rounded to the millisecond, or "—" when l is empty.
func pctOr(l []time.Duration, q float64) string {
	if len(l) == 0 {
		return "—"
	}
	return pct(l, q).Round(time.Millisecond).String()
}

// stop stops the members still running: their input closed and SIGTERM,
// then SIGKILL to one not ended 15 s later; it returns their errors (a
// killed member's end is none). It does nothing the second time.
func (r *scaleRun) stop() error {
	if r.stopped {
		return nil
	}
	r.stopped = true
	for _, m := range r.members {
		_ = m.in.Close()
		if !m.killed {
			_ = m.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	var errs []error
	for _, m := range r.members {
		if err := m.wait(); err != nil {
			errs = append(errs, err)
		}
	}
	r.wg.Wait()
	return errors.Join(errs...)
}

// wait waits for m to end after its output did, killing it (SIGKILL) after
// 15 s.
func (m *scaleMember) wait() error {
	ended := make(chan error, 1)
	go func() {
		<-m.read // Wait closes the output: read it to its end first
		ended <- m.cmd.Wait()
	}()
	var err error
	select {
	case err = <-ended:
	case <-time.After(15 * time.Second):
		_ = m.cmd.Process.Kill()
		err = fmt.Errorf("not ended 15 s after SIGTERM: %w", <-ended)
	}
	if err != nil && !m.killed {
		return fmt.Errorf("member %s: %w", m.name, err)
	}
	return nil
}

// memberOut is a member process's standard output, a line protocol: each
// write whole.
type memberOut struct{ mu sync.Mutex }

func (o *memberOut) write(s string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, err := io.WriteString(os.Stdout, s)
	return err
}

// memberPublisher is a member's publisher: it counts the burn events (topic)
// and writes a line per trickle event (any other topic) before returning.
type memberPublisher struct {
	message.Publisher
	topic string
	out   *memberOut
	n     atomic.Int64
	last  atomic.Int64 // unix ns of the last burn publish
}

func (p *memberPublisher) Publish(topic string, msgs ...*message.Message) error {
	if err := p.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	now := time.Now().UnixNano()
	if topic == p.topic {
		p.n.Add(int64(len(msgs)))
		p.last.Store(now)
		return nil
	}
	var b strings.Builder
	for _, m := range msgs {
		fmt.Fprintf(&b, "ev %s %s %d\n", m.Metadata.Get(events.MetaTenant), m.Metadata.Get(events.MetaAggregateID), now)
	}
	return p.out.write(b.String())
}

// memberLog is a member's fleet's log: "fleet: members changed" becomes a
// "members <n>" line, warnings and errors go to standard error.
type memberLog struct {
	out  *memberOut
	warn slog.Handler
}

func (h memberLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h memberLog) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Level >= slog.LevelWarn {
		return h.warn.Handle(ctx, rec)
	}
	if rec.Message != "fleet: members changed" {
		return nil
	}
	var err error
	rec.Attrs(func(a slog.Attr) bool {
		if live, ok := a.Value.Any().([]string); ok && a.Key == "members" {
			err = h.out.write(fmt.Sprintf("members %d\n", len(live)))
			return false
		}
		return true
	})
	return err
}

func (h memberLog) WithAttrs(as []slog.Attr) slog.Handler {
	return memberLog{out: h.out, warn: h.warn.WithAttrs(as)}
}

func (h memberLog) WithGroup(name string) slog.Handler {
	return memberLog{out: h.out, warn: h.warn.WithGroup(name)}
}

// runFleetMember is the scale part's member process (bench fleet-member):
// a fleet over the tenants its input lists (read through one pool on
// HERALD_BENCH_DSN, of HERALD_BENCH_DB), with Members on that database,
// InstanceID HERALD_BENCH_MEMBER, MemberTTL HERALD_BENCH_MEMBER_TTL and
// MaxConns HERALD_BENCH_MAX_CONNS, publishing to HERALD_BENCH_PUBLISHER
// (the burn events on HERALD_BENCH_TOPIC), until SIGTERM. See the line
// protocol above.
func runFleetMember() error {
	bdb, err := pickDB(os.Getenv("HERALD_BENCH_DB"))
	if err != nil {
		return err
	}
	ttl, err := time.ParseDuration(os.Getenv("HERALD_BENCH_MEMBER_TTL"))
	if err != nil {
		return fmt.Errorf("HERALD_BENCH_MEMBER_TTL: %w", err)
	}
	conns, err := strconv.Atoi(os.Getenv("HERALD_BENCH_MAX_CONNS"))
	if err != nil {
		return fmt.Errorf("HERALD_BENCH_MAX_CONNS: %w", err)
	}
	name, dsn, topic := os.Getenv("HERALD_BENCH_MEMBER"), os.Getenv("HERALD_BENCH_DSN"), os.Getenv("HERALD_BENCH_TOPIC")
	in := bufio.NewScanner(os.Stdin)
	var ts []tenantOutbox
	for in.Scan() && in.Text() != "end" {
		if id, table, ok := strings.Cut(strings.TrimPrefix(in.Text(), "tenant "), " "); ok {
			ts = append(ts, tenantOutbox{id: id, table: table})
		}
	}
	if len(ts) == 0 {
		return errors.New("no tenant on the standard input")
	}
	pool, err := bdb.open(dsn)
	if err != nil {
		return err
	}
	defer closeGorm(pool)
	if s, err := pool.DB(); err == nil {
		s.SetMaxOpenConns(conns)
	}
	control, err := bdb.open(dsn)
	if err != nil {
		return err
	}
	defer closeGorm(control)
	inner, closePub, err := target(os.Getenv("HERALD_BENCH_PUBLISHER"), topic)
	if err != nil {
		return err
	}
	defer closePub()
	out := &memberOut{}
	pub := &memberPublisher{Publisher: inner, topic: topic, out: out}
	var (
		listed   atomic.Bool
		listedAt atomic.Int64 // unix ns
	)
	list := fleetTenants(ts, pool, nil)
	f, err := fleet.New(pub, fleet.Config{
		Tenants: func(ctx context.Context) ([]fleet.Tenant, error) {
			if !listed.Load() {
				return nil, nil
			}
			listedAt.CompareAndSwap(0, time.Now().UnixNano())
			return list(ctx)
		},
		Relay:     relay.Config{InstanceID: name, Logger: discardLogger()},
		MaxConns:  conns,
		Members:   control,
		MemberTTL: ttl,
		Logger:    slog.New(memberLog{out: out, warn: slog.NewTextHandler(os.Stderr, nil).WithAttrs([]slog.Attr{slog.String("member", name)})}),
	})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	// It waits for "go" and ends there or at the end of the input (the
	// bench closes it before SIGTERM).
	go func() {
		for in.Scan() {
			if in.Text() == "go" {
				listed.Store(true)
				f.Wake(ts[0].id) // an id it does not know: it lists the tenants within a second
				return
			}
		}
	}()
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	report := func(what string) error {
		owned := 0
		for _, s := range f.Status() {
			if s.State != "elsewhere" {
				owned++
			}
		}
		return out.write(fmt.Sprintf("%s %d %d %d %d\n", what, pub.n.Load(), owned, pub.last.Load(), listedAt.Load()))
	}
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case err := <-done:
			return errors.Join(err, report("done"))
		case <-t.C:
			_ = report("count") // the bench reads the next
		}
	}
}

// intList parses -processes: positive counts, comma-separated.
func intList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("bad -processes %q", s)
		}
		out = append(out, v)
	}
	return out, nil
}
