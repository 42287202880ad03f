package drivers

import (
	"errors"
	"testing"

	gormpg "gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/store"
)

// A driver has the WAL relay's operations (Driver.WAL) exactly when it can
// keep the outbox in its log (Messages): admin, walrelay and the herald
// command test the one, the outbox hook the other.
func TestWALIsMessages(t *testing.T) {
	for _, d := range all {
		if has, wal := d.Caps().Has(store.Messages), d.WAL() != nil; has != wal {
			t.Errorf("%s: Messages %v, WAL %v", d.Name(), has, wal)
		}
	}
}

// ForDialector picks the driver by the dialector's name, without a
// connection; no dialector is unsupported.
func TestForDialector(t *testing.T) {
	d, err := ForDialector(gormpg.New(gormpg.Config{}))
	if err != nil || d.WAL() == nil {
		t.Fatalf("ForDialector(postgres) = %v, %v", d, err)
	}
	if _, err := ForDialector(nil); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("ForDialector(nil) = %v", err)
	}
	if _, err := For(&gorm.DB{Config: &gorm.Config{}}); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("For(no dialector) = %v", err)
	}
}
