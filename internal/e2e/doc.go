// Package e2e holds tests that span the write path, the relay and the inbox.
package e2e
