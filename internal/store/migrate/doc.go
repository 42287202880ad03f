// Package migrate is Herald's migration engine, the same on every database: it
// reads a driver's numbered migration files (NNNN_name.up.sql/.down.sql and
// their "-- herald:" comments) into the objects each statement makes
// (store.Object), applies the migrations not yet recorded (Migrate), and makes
// and checks at start what Herald uses of them (Schema, CreateMissing,
// CheckSchema). It asks the database only through a store.Driver (its
// migrations, its quoting, ObjectExists), so it names no database: the
// drivers use it for their Create and Check, package migrations and the
// herald command for migrations and their status.
package migrate
