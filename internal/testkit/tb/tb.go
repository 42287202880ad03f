// Package tb is the part of a test the test-support packages (testkit, pgtest,
// mysqltest, logicaltest, drivertest, the examples' brokertest) use, declared
// here so that none of them imports package testing: they are ordinary
// packages, which the benchmarks, the chaos run and the examples' programs
// import too, and a production build that reaches one of them would carry
// package testing and its flags. A *testing.T, *testing.B or testing.TB is a
// TB, so a test passes its t unchanged.
package tb

// TB is what the support packages call on a test: the methods of testing.TB
// they use, and no others.
type TB interface {
	Helper()
	Cleanup(f func())
	Error(args ...any)
	Errorf(format string, args ...any)
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Skip(args ...any)
	TempDir() string
}

// T is a TB that runs subtests, in parallel: *testing.T is a T[*testing.T].
// A support function that runs subtests takes a T of its own type parameter
// (func ForEach[T tb.T[T]](t T, f func(t T, ...))), so that a test passes its
// *testing.T, and functions that take a *testing.T, unchanged.
type T[Self any] interface {
	TB
	Parallel()
	Run(name string, f func(t Self)) bool
}
