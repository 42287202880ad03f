package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// statusFile is what one fleet process wrote (sampler): its slot, member
// name and pid, and its samples.
type statusFile struct {
	slot     int
	instance string
	pid      int
	samples  []statusSample
	exit     time.Time // when it exited (zero: it ran to the end of the run)
}

type statusSample struct {
	at      time.Time
	acked   int64
	served  []string
	failing []string
}

// readStatus reads every fleet process's file.
func readStatus(dir string) ([]statusFile, error) {
	names, err := filepath.Glob(filepath.Join(statusDir(dir), "*"))
	if err != nil {
		return nil, err
	}
	var out []statusFile
	for _, name := range names {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		var sf statusFile
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 1<<16), 1<<24)
		for sc.Scan() {
			line := sc.Text()
			if rest, ok := strings.CutPrefix(line, "# exit "); ok {
				if ns, err := strconv.ParseInt(rest, 10, 64); err == nil {
					sf.exit = time.Unix(0, ns)
				}
				continue
			}
			if rest, ok := strings.CutPrefix(line, "# "); ok {
				_, _ = fmt.Sscanf(rest, "%d %s %d", &sf.slot, &sf.instance, &sf.pid)
				continue
			}
			fs := strings.Fields(line)
			if len(fs) != 4 {
				continue // a line cut by a SIGKILL
			}
			ns, err1 := strconv.ParseInt(fs[0], 10, 64)
			acked, err2 := strconv.ParseInt(fs[1], 10, 64)
			if err1 != nil || err2 != nil {
				continue
			}
			sf.samples = append(sf.samples, statusSample{at: time.Unix(0, ns), acked: acked, served: split(fs[2]), failing: split(fs[3])})
		}
		_ = f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
		out = append(out, sf)
	}
	return out, nil
}

func split(s string) []string {
	if s == "-" {
		return nil
	}
	return strings.Split(s, ",")
}

// slotShare is what one slot's processes did over the run.
type slotShare struct {
	processes int             // processes started in the slot (with samples)
	names     map[string]bool // member names
	served    map[string]bool // tenants served at some time
	final     int             // tenants served at the last sample of its last process
	acked     int64           // messages JetStream acknowledged (at least: a killed process's last ones are not written)
	peak      int             // the most tenants served at once
}

// shares sums the status files per slot, and counts the takeovers: a tenant
// a member starts serving (it was not in its previous sample) that another
// member was the last to start serving.
func shares(files []statusFile) (map[int]*slotShare, int) {
	out := map[int]*slotShare{}
	type gain struct {
		at       time.Time
		instance string
		tenants  []string
	}
	var gains []gain
	lastStart := map[int]time.Time{}
	for _, sf := range files {
		if len(sf.samples) == 0 {
			continue
		}
		s := out[sf.slot]
		if s == nil {
			s = &slotShare{names: map[string]bool{}, served: map[string]bool{}}
			out[sf.slot] = s
		}
		s.processes++
		s.names[sf.instance] = true
		var prev []string
		for _, smp := range sf.samples {
			var gained []string
			for _, t := range smp.served {
				s.served[t] = true
				if !slices.Contains(prev, t) {
					gained = append(gained, t)
				}
			}
			if len(gained) > 0 {
				gains = append(gains, gain{at: smp.at, instance: sf.instance, tenants: gained})
			}
			s.peak = max(s.peak, len(smp.served))
			prev = smp.served
		}
		last := sf.samples[len(sf.samples)-1]
		s.acked += last.acked
		if first := sf.samples[0].at; first.After(lastStart[sf.slot]) {
			lastStart[sf.slot] = first
			s.final = len(last.served)
		}
	}
	slices.SortFunc(gains, func(a, b gain) int { return a.at.Compare(b.at) })
	owner := map[string]string{}
	takeovers := 0
	for _, g := range gains {
		for _, t := range g.tenants {
			if o := owner[t]; o != "" && o != g.instance {
				takeovers++
			}
			owner[t] = g.instance
		}
	}
	return out, takeovers
}

// shownFailing reports the members that showed tenant failing between from
// and until.
func shownFailing(files []statusFile, tenant string, from, until time.Time) []string {
	var out []string
	for _, sf := range files {
		for _, smp := range sf.samples {
			if !smp.at.Before(from) && !smp.at.After(until) && slices.Contains(smp.failing, tenant) {
				if !slices.Contains(out, sf.instance) {
					out = append(out, sf.instance)
				}
				break
			}
		}
	}
	return out
}

// timeline tells who served tenant between from and until, by the status
// files: each member's spans that overlap them, in seconds from start
// ("fleet2-1 10.2-12.0s (failing at 11.0s)"; "12.5s-": still at until).
func timeline(files []statusFile, tenant string, from, until, start time.Time) string {
	rel := func(t time.Time) string { return fmt.Sprintf("%.1f", t.Sub(start).Seconds()) }
	var parts []string
	for _, sf := range files {
		var (
			spans   []string
			since   time.Time
			failing time.Time
		)
		end := func(at time.Time, open bool) {
			if since.IsZero() {
				return
			}
			if !at.Before(from) && !since.After(until) {
				if open {
					spans = append(spans, rel(since)+"s-")
				} else {
					spans = append(spans, rel(since)+"-"+rel(at)+"s")
				}
			}
			since = time.Time{}
		}
		for _, smp := range sf.samples {
			if smp.at.After(until) {
				break
			}
			switch in := slices.Contains(smp.served, tenant); {
			case in && since.IsZero():
				since = smp.at
			case !in:
				end(smp.at, false)
			}
			if failing.IsZero() && !smp.at.Before(from) && slices.Contains(smp.failing, tenant) {
				failing = smp.at
			}
		}
		if !sf.exit.IsZero() && sf.exit.Before(until) {
			end(sf.exit, false)
		} else {
			end(until, true)
		}
		if len(spans) == 0 {
			continue
		}
		p := sf.instance + " " + strings.Join(spans, ", ")
		if !failing.IsZero() {
			p += " (failing at " + rel(failing) + "s)"
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return "nobody"
	}
	return strings.Join(parts, "; ")
}
