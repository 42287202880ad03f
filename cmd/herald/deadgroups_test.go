package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

// dead groups lists the groups with their keys; dead requeue and dead purge
// act on one, once, with a dry run; dead audit reads the trail back.
func TestDeadGroupCommands(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d, true)
		if out := e.must(exitOK, "dead", "groups"); out != "no dead events\n" {
			t.Fatalf("dead groups, none:\n%s", out)
		}
		if out := e.must(exitOK, "dead", "audit"); out != "no bulk action recorded\n" {
			t.Fatalf("dead audit, none:\n%s", out)
		}
		ids := e.add(OrderPlaced{OrderID: "1"}, OrderPlaced{OrderID: "2"}, OrderPlaced{OrderID: "3"}, PaymentTaken{OrderID: "4"}, PaymentTaken{OrderID: "5"})
		e.kill(ids[0], 3*time.Hour, "timeout after 5s to 10.0.0.7")
		e.kill(ids[1], 2*time.Hour, "timeout after 9s to 10.0.0.9")
		e.kill(ids[2], time.Hour, "schema mismatch")
		e.kill(ids[3], 72*time.Hour, "refused: 0190c3e2-5b7a-7c1e-9f3d-2a4b6c8d0e1f")
		e.kill(ids[4], time.Hour, "refused: 0190c3e2-5b7a-7c1e-9f3d-2a4b6c8d0e20")

		out := e.must(exitOK, "dead", "groups", "--json")
		var gs admin.DeadGroups
		testkit.Must(t, json.Unmarshal([]byte(out), &gs))
		if len(gs.Groups) != 3 || gs.Scanned != 5 || gs.Groups[0].Events != 2 || gs.Groups[2].Events != 1 {
			t.Fatalf("dead groups --json:\n%s", out)
		}
		keys := map[string]string{}
		for _, g := range gs.Groups {
			keys[g.Error] = g.Key
		}
		timeout, refused := keys["timeout after <n>s to <ip>"], keys["refused: <uuid>"]
		if timeout == "" || refused == "" {
			t.Fatalf("groups: %+v", gs.Groups)
		}
		out = e.must(exitOK, "dead", "groups")
		if !strings.Contains(out, "order.placed: timeout after <n>s to <ip>\n  2 dead events, died ") || !strings.Contains(out, "\n  key:    "+timeout+"\n") ||
			!strings.Contains(out, "\n  sample: timeout after 9s to 10.0.0.9\n") {
			t.Fatalf("dead groups:\n%s", out)
		}

		out = e.must(exitOK, "dead", "requeue", "--group", timeout, "--dry-run")
		if out != "dry run: would requeue 2 dead events of type order.placed with error \"timeout after <n>s to <ip>\"\n" ||
			e.state(ids...) != "dead dead dead dead dead" {
			t.Fatalf("dead requeue --dry-run:\n%s", out)
		}
		out = e.must(exitOK, "dead", "requeue", "--group", timeout, "--by", "alice")
		if out != "requeued 2 dead events of type order.placed with error \"timeout after <n>s to <ip>\"\n" ||
			e.state(ids...) != "pending pending dead dead dead" {
			t.Fatalf("dead requeue:\n%s", out)
		}
		out = e.must(exitOK, "dead", "requeue", "--group", timeout, "--by", "alice")
		if !strings.HasPrefix(out, "no dead events of type order.placed") || e.state(ids...) != "pending pending dead dead dead" {
			t.Fatalf("dead requeue again:\n%s", out)
		}
		out = e.must(exitOK, "dead", "purge", "--group", refused, "--older-than", "1d", "--by", "bob")
		if out != "purged 1 dead event of type payment.taken with error \"refused: <uuid>\" that died more than 1d ago\n" ||
			e.state(ids...) != "pending pending dead gone dead" {
			t.Fatalf("dead purge --older-than:\n%s", out)
		}
		out = e.must(exitOK, "dead", "audit")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 4 || !strings.Contains(lines[1], "bob") || !strings.Contains(lines[1], "purge-group") ||
			!strings.Contains(lines[3], "alice") || !strings.Contains(lines[3], "requeue-group") || !strings.Contains(lines[3], " 2 ") {
			t.Fatalf("dead audit:\n%s", out)
		}
		var es []admin.AuditEntry
		testkit.Must(t, json.Unmarshal([]byte(e.must(exitOK, "dead", "audit", "--json")), &es))
		if len(es) != 3 || es[0].Events != 1 || es[2].Events != 2 || es[1].Events != 0 {
			t.Fatalf("dead audit --json: %+v", es)
		}

		e.refuse(exitUsage, []string{"--group: required"}, "dead", "requeue")
		e.refuse(exitUsage, []string{"not a dead group key"}, "dead", "purge", "--group", "nonsense")
		e.refuse(exitUsage, []string{"flag provided but not defined: -older-than"}, "dead", "requeue", "--group", timeout, "--older-than", "1d")
	})
}

// status says whether relays are alive when all is well too, not only as a
// problem.
func TestStatusRelaysLine(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d, true)
		if out := e.must(exitOK, "status"); !strings.HasSuffix(out, "\nrelays: none has recorded a heartbeat on this outbox yet\nhealthy\n") {
			t.Fatalf("status, no relay ever:\n%s", out)
		}
		pub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
		t.Cleanup(func() { _ = pub.Close() })
		r, err := relay.New(e.db, pub, relay.Config{Logger: testkit.Quiet()})
		testkit.Must(t, err)
		_, stop := testkit.Run(t, r.Run)
		testkit.Eventually(t, 10*time.Second, "a relay alive", func() bool {
			_, out, _ := e.run("status")
			return strings.Contains(out, "\nrelays: 1 alive, last seen ") && strings.HasSuffix(out, " ago\nhealthy\n")
		})
		stop()
	})
}
