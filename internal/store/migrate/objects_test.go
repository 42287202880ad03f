package migrate

import (
	"testing"
	"testing/fstest"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
)

// Every driver's relay additions include the leases' generation column, an
// ALTER TABLE the self-creation runs when the column is missing.
func TestRelayObjectsAddTheGeneration(t *testing.T) {
	fsys := fstest.MapFS{
		"0002_relay.up.sql":              {Data: []byte("CREATE TABLE IF NOT EXISTS \"outbox_messages_leases\" (partition int);\n")},
		"0002_relay.down.sql":            {Data: []byte("DROP TABLE \"outbox_messages_leases\";\n")},
		"0005_lease_generation.up.sql":   {Data: []byte("-- c\nALTER TABLE \"outbox_messages_leases\" ADD COLUMN IF NOT EXISTS generation bigint NOT NULL DEFAULT 0;\n")},
		"0005_lease_generation.down.sql": {Data: []byte("ALTER TABLE \"outbox_messages_leases\" DROP COLUMN generation;\n")},
	}
	objs, err := RelayObjects(fsys, ident.MustTable("app.events"), ident.Table.Quoted, true, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 {
		t.Fatalf("objects = %+v", objs)
	}
	add := objs[1]
	if add.Column != "generation" || add.Name.String() != "app.events_leases" || add.Kind != store.KindColumn ||
		add.SQL != `ALTER TABLE "app"."events_leases" ADD COLUMN IF NOT EXISTS generation bigint NOT NULL DEFAULT 0` {
		t.Fatalf("the column object = %+v", add)
	}
}
